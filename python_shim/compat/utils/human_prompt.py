"""`from utils.human_prompt import HumanPromptService, PromptResult`, as the original convention spells it.

Under toolpool `_context["human_prompt"]` is a proxy that forwards the question
to the supervisor's front end (see toolpool_shim/services.py).
"""

from toolpool_shim.services import HumanPromptService, PromptResult

__all__ = ["HumanPromptService", "PromptResult"]
