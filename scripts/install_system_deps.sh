#!/usr/bin/env bash
# System packages the project uses beyond Python, installed from Debian's packages when
# we can (root or passwordless sudo); otherwise we say what to install:
#   bubblewrap  sandboxes autograded submissions (grader/ falls back to `unshare` without it)
#   chromium    the browser the hub's end-to-end test drives through Playwright (the test
#               is skipped without it; Playwright's own browser download is never used)
# NK_SKIP_BROWSER=1 leaves chromium out (it is about 300 MB).
set -u
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
if [ "${NK_SKIP_BROWSER:-0}" != "1" ] && ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "note: ${missing[*]} not installed; install them with your package manager" \
         "(bubblewrap for sandboxed autograding, chromium for the browser test)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
        echo "note: run 'sudo apt-get install ${missing[*]}' (bubblewrap: sandboxed autograding;" \
             "chromium: the hub's browser test)" >&2
        exit 0
    fi
fi
echo "installing ${missing[*]} from Debian's packages"
$SUDO apt-get update -qq >/dev/null || true
for package in "${missing[@]}"; do
    # one at a time: a missing browser must not stop the sandbox from being installed
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null \
        || echo "warning: could not install $package" \
                "($([ "$package" = bubblewrap ] && echo "autograding will fall back to unshare" \
                                                 || echo "the browser test will be skipped"))" >&2
done
exit 0
