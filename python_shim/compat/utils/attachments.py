"""`from utils.attachments import AttachmentStore, AttachmentRecord`, as the original convention spells it.

Used only when the project has no `utils.attachments` of its own. Under
toolpool `_context["attachment_store"]` is a proxy to the session's store,
which the supervisor keeps (see toolpool_shim/proxies.py); `isinstance(store,
AttachmentStore)` holds for it.
"""

from toolpool_shim.records import AttachmentRecord
from toolpool_shim.standins import AttachmentStore

__all__ = ["AttachmentRecord", "AttachmentStore"]
