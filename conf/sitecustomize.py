# SPDX-License-Identifier: LGPL-2.1-or-later
# scopebox: bound at the sandbox's /etc/python3.N/sitecustomize.py when the operator has a site
# directory (scopeboxctl packages install). It adds those packages after Debian's, .pth files
# included; the directory is read-only here.
import os as _os
import site as _site

if _os.path.isdir("/opt/scopebox/site-packages"):
    _site.addsitedir("/opt/scopebox/site-packages")
del _os, _site
