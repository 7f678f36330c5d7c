"""A cloned sandboxed worker's own /tmp: which of the view's mounts under
/tmp it binds again (toolpool_shim.sandbox._fresh_tmp)."""

import unittest

import support  # noqa: F401  (puts the shim on sys.path)
from toolpool_shim import sandbox

# /proc/self/mountinfo lines: the fifth field is the mount point.
MOUNTINFO = b"""\
22 1 0:40 / / rw - tmpfs tmpfs rw
23 22 0:41 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw
24 23 8:1 /s/code_workspace /tmp/.tmpAbc/code_workspace rw - ext4 /dev/sda1 rw
25 24 8:1 /s/attachments /tmp/.tmpAbc/code_workspace/attachments ro - ext4 /dev/sda1 rw
26 23 8:1 /s/site-packages /tmp/.tmpAbc/site-packages rw - ext4 /dev/sda1 rw
27 23 8:1 /odd /tmp/with\\040space rw - ext4 /dev/sda1 rw
28 23 0:42 / /tmp/.toolpool-tmp-1 rw - tmpfs tmpfs rw
29 22 8:1 /usr /usr ro - ext4 /dev/sda1 rw
30 22 0:43 / /tmpfoo rw - tmpfs tmpfs rw
"""


class OwnTmp(unittest.TestCase):
    def test_the_outermost_mounts_under_tmp_are_bound_again(self):
        points = sandbox._outermost(MOUNTINFO, b"/tmp/", b"/tmp/.toolpool-tmp-1")
        # Nested ones (attachments) come along with their parent (MS_REC);
        # /tmp itself, the staging tmpfs and /tmpfoo are not under /tmp/.
        self.assertEqual(points, [
            b"/tmp/.tmpAbc/code_workspace",
            b"/tmp/.tmpAbc/site-packages",
            b"/tmp/with space",
        ])

    def test_escapes_are_decoded_and_a_lone_backslash_kept(self):
        self.assertEqual(sandbox._unescape(b"/a\\040b\\011c\\134d"), b"/a b\tc\\d")
        self.assertEqual(sandbox._unescape(b"/a\\04"), b"/a\\04")
        self.assertEqual(sandbox._unescape(b"/plain"), b"/plain")


if __name__ == "__main__":
    unittest.main()
