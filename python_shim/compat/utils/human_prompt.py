"""`from utils.human_prompt import HumanPromptService, PromptResult`, as the original convention spells it.

Used only when the project has no `utils.human_prompt` of its own. Under
toolpool `_context["human_prompt"]` is a proxy that forwards the question to
the supervisor's front end (see toolpool_shim/proxies.py).
"""

from toolpool_shim.records import PromptResult
from toolpool_shim.standins import HumanPromptService

__all__ = ["HumanPromptService", "PromptResult"]
