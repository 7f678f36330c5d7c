"""`from utils.attachments import AttachmentStore, AttachmentRecord`, as the original convention spells it.

Under toolpool `_context["attachment_store"]` is a proxy to the session's store,
which the supervisor keeps (see toolpool_shim/services.py); `isinstance(store,
AttachmentStore)` holds for it.
"""

from toolpool_shim.services import AttachmentRecord, AttachmentStore

__all__ = ["AttachmentRecord", "AttachmentStore"]
