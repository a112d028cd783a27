"""JupyterHub for the course, from the settings `hub/launch.py` wrote (NK_HUB_SETTINGS).

nbgrader's documented multi-user layout, on JupyterHub 5/6 roles and groups:
- the formgrader is a hub service named after the course, a JupyterLab server started
  in the course folder as the grader account; its landing page is the formgrader
  itself, opened as a page of its own: JupyterHub >= 4.1 serves every single-user
  page with `Content-Security-Policy: frame-ancestors 'none'`, so the formgrader panel
  inside JupyterLab (an iframe) stays blank. Relaxing it to 'self' would let any other
  user's server on the same origin frame the instructor's formgrader (clickjacking),
  so the policy stays and the formgrader gets its own tab.
- `formgrade-COURSE` (instructors, TAs) may open the service; `nbgrader-COURSE`
  (students, and the teaching staff, to try assignments) may discover it;
- every server may query the hub as its owner (`server` role: inherit), which
  `JupyterHubAuthPlugin` needs to list a user's courses.

Each server starts through `hub/singleuser.py`, which pulls the published lectures into
the user's home first. Servers outlive the hub: stopping or restarting it leaves them
running (`cleanup_servers = False`), and the restarted hub finds them again through the
process ids it keeps in its database. jupyterhub-idle-culler, a hub service, stops those
left idle (`--cull-idle`); their files stay, and the next login starts them again.
"""

import json
import os
import sys

settings = json.load(open(os.environ["NK_HUB_SETTINGS"]))
course, single = settings["course"], settings["mode"] == "single"
bin_dir = settings["bin"]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

c = get_config()  # noqa: F821
c.JupyterHub.ip = settings["ip"]
c.JupyterHub.port = settings["port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = settings["hub_port"]
c.JupyterHub.db_url = f"sqlite:///{settings['state']}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{settings['state']}/jupyterhub_cookie_secret"
# the pure-Python configurable-http-proxy from PyPI, started and stopped by the hub
# its requests wait as long as nbgrader's slowest: validating or autograding a course
# notebook takes minutes, past the proxy's default of 20 s (a 503 in the student's panel)
c.ConfigurableHTTPProxy.command = [os.path.join(bin_dir, "configurable-http-proxy"),
                                   "--proxy-timeout", str(30 * 60 * 1000)]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings['proxy_api_port']}"

staff = settings["instructors"] + settings["tas"]
everyone = staff + settings["students"]
c.Authenticator.allowed_users = set(everyone)
c.Authenticator.admin_users = set(settings["instructors"])
if single:
    from roster_auth import RosterAuthenticator

    c.JupyterHub.authenticator_class = RosterAuthenticator
    c.RosterAuthenticator.password_file = settings["password_file"]
    c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
    c.SimpleLocalProcessSpawner.home_dir_template = os.path.join(settings["state"], "homes", "{username}")
else:
    c.JupyterHub.authenticator_class = "pam"
    c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"

c.Spawner.cmd = [settings["python"], os.path.join(settings["repo"], "hub", "singleuser.py")]
c.Spawner.default_url = "/lab"
# users' servers, with their kernels, outlive a stop or a restart of the hub
c.JupyterHub.cleanup_servers = False
c.Spawner.notebook_dir = "~"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 120
# the hub's nbgrader settings (exchange, path_includes_course, JupyterHubAuthPlugin)
# come before each user's own configuration
c.Spawner.environment = {
    "JUPYTER_CONFIG_PATH": f"{settings['config_dir']}-users:{settings['config_dir']}",
    # what hub/singleuser.py pulls, and where to
    "NK_LECTURES_REPO": settings["lectures_repo"], "NK_LECTURES_DIR": os.path.join(course, "lectures"),
    "NK_HUB_GITCONFIG": settings["gitconfig"],
    # the threads a user's kernels compute on (see hub/launch.py: students share the cores)
    "OMP_NUM_THREADS": str(settings["threads_per_user"]),
    # and whose idle threads sleep after a short spin: libgomp's default spin keeps a finished
    # kernel's threads on the cores for milliseconds, which another user's kernels then wait
    # out (benchmarks/bench_wait_policy.py, its rows for two processes at once)
    "GOMP_SPINCOUNT": "1000",
}
if settings.get("data_dir"):
    # the lectures' MNIST, PTB and CIFAR-10, in a folder every account can read
    c.Spawner.environment["NEEDLE_DATA_DIR"] = settings["data_dir"]
if os.geteuid() == 0 and single:
    # single-account mode run by root: the servers are root's too (JupyterLab refuses that
    # without this flag); the printed warning says students are not isolated
    c.Spawner.args = ["--allow-root"]

c.JupyterHub.load_groups = {
    "instructors": {"users": settings["instructors"]},
    # the grader account is a hub user too (it cannot log in): the formgrader's own
    # exchange listing asks the hub which courses it belongs to
    f"formgrade-{course}": {"users": staff + [settings["grader_account"]]},
    f"nbgrader-{course}": {"users": everyone},
}
c.JupyterHub.load_roles = [
    {"name": "instructor", "groups": ["instructors"], "scopes": ["admin:users", "admin:servers"]},
    {"name": "server", "scopes": ["inherit"]},
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
    {"name": f"formgrade-{course}", "groups": [f"formgrade-{course}"],
     "scopes": [f"access:services!service={course}"]},
    {"name": f"nbgrader-{course}", "groups": [f"nbgrader-{course}"],
     "scopes": ["list:services", f"read:services!service={course}"]},
    # the formgrader adds and removes students of the course group (JupyterHubAuthPlugin)
    {"name": f"grader-{course}", "services": [course],
     "scopes": ["list:users", "read:users", "list:groups", "read:groups", f"groups!group=nbgrader-{course}"]},
]

service_env = {
    "JUPYTERHUB_DEFAULT_URL": "/formgrader",
    "JUPYTER_CONFIG_PATH": f"{settings['config_dir']}-service:{settings['config_dir']}",
    # nbgrader's hub plugin asks who is calling; the service acts as the grader account
    "JUPYTERHUB_USER": settings["grader_account"],
    "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
    "PYTHONPATH": settings["repo"],
}
if not single:
    # the grader account's grading jobs and sandbox slot locks, away from the shared /tmp
    # (`make hub-users` makes this folder)
    import pwd

    service_env["TMPDIR"] = os.path.join(pwd.getpwnam(settings["grader_account"]).pw_dir, ".cache", "grader-tmp")
service_cmd = [os.path.join(bin_dir, "jupyterhub-singleuser"), f"--ServerApp.root_dir={settings['course_dir']}"]
if os.geteuid() == 0 and single:
    service_cmd.append("--allow-root")
service = {
    "name": course, "url": f"http://127.0.0.1:{settings['service_port']}", "command": service_cmd,
    "cwd": settings["course_dir"], "environment": service_env, "api_token": settings["service_token"],
    "oauth_no_confirm": True, "display": True,
}
if not single:
    service["user"] = settings["grader_account"]
c.JupyterHub.services = [service]
if settings["cull_idle"]:
    c.JupyterHub.services.append({
        "name": "idle-culler", "api_token": settings["culler_token"],
        "command": [settings["python"], "-m", "jupyterhub_idle_culler", f"--timeout={settings['cull_idle']}",
                    f"--cull-every={max(5, min(300, settings['cull_idle'] // 4))}"],
    })
