"""A user's server as the hub starts it: the course's lectures pulled first, then JupyterLab.

    python hub/singleuser.py [jupyterhub-singleuser arguments]

Runs as the user, in their home. nbgitpuller brings the lectures the hub published
(NK_LECTURES_REPO, a git repository of course/lectures) into ~/COURSE/lectures: the
first time it clones them, every later start merges the instructor's changes with the
student's own, which always win (a file both changed keeps the student's version; a
new upstream file in the way of one of theirs is added beside it). A failed pull never
keeps the server from starting: it is printed to the hub's log and tried again at the
next start.
"""

import os
import subprocess
import sys


def pull_lectures():
    repo, target = os.environ.get("NK_LECTURES_REPO"), os.environ.get("NK_LECTURES_DIR")
    if not repo or not target:
        return
    target = os.path.join(os.path.expanduser("~"), target)
    # the published repository belongs to the hub's account; git refuses to read another
    # account's repository unless a global setting names it, which this file does
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.environ.get("NK_HUB_GITCONFIG", os.devnull),
           "NBGITPULLER_DEPTH": "0"}
    try:
        done = subprocess.run([sys.executable, "-m", "nbgitpuller.pull", f"file://{repo}", "main", target],
                              env=env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            print(f"pulling the lectures into {target} failed:\n{done.stdout[-2000:]}", file=sys.stderr)
    except (OSError, subprocess.TimeoutExpired) as err:
        print(f"pulling the lectures into {target} failed: {err}", file=sys.stderr)


def main():
    pull_lectures()
    os.execv(sys.executable, [sys.executable, "-m", "jupyterhub.singleuser", *sys.argv[1:]])


if __name__ == "__main__":
    main()
