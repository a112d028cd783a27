"""The term in JupyterLab's assignment list: a Jupyter server extension.

    GET /grader/term?course_id=COURSE

answers, for the logged-in student, each assignment of COURSE that nbgrader lists
(released, fetched or submitted) with the lines `grader fetch` prints about it
(`grader.term.status_lines`: due date in the server's zone, extension, late days left)
and whether feedback released for it differs from the feedback already fetched:

    {"course_id": "dlsys", "assignments": {"hw1": {"lines": [...], "feedback_updated": false}}}

The exchange and the student come from nbgrader's own configuration, loaded by
nbgrader's assignment-list extension (which must be enabled too), so both lists agree
on which exchange and which account they read. The lab extension in
`grader/labextension/` adds these lines to the rows of nbgrader's panel.
"""

import json

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

ROUTE = "/grader/term"


def _student(config) -> str:
    from nbgrader.utils import get_username

    named = config.CourseDirectory.get("student_id", "*")
    return named if isinstance(named, str) and named != "*" else get_username()


def _assignment_ids(listing) -> set:
    if not listing.get("success"):
        raise web.HTTPError(502, f"nbgrader could not list the assignments: {listing.get('value')}")
    return {entry["assignment_id"] for entry in listing["value"]}


def term_of_course(manager, course_id) -> dict:
    """The answer of GET /grader/term for one course (see the module's doc)."""
    from grader.term import read_term, status_lines

    released = manager.list_released_assignments(course_id=course_id)
    submitted = manager.list_submitted_assignments(course_id=course_id)
    names = _assignment_ids(released) | _assignment_ids(submitted)
    # nbgrader's own comparison of the student's copy of each feedback page with the exchange's
    updated = {entry["assignment_id"] for entry in submitted["value"]
               if any(s.get("feedback_updated") for s in entry.get("submissions", []))}
    with manager.get_assignment_dir_config() as config:
        term = read_term(course_id, config.Exchange.root, _student(config))
    return {"course_id": course_id,
            "assignments": {name: {"lines": status_lines(term, name), "feedback_updated": name in updated}
                            for name in sorted(names)}}


class TermHandler(APIHandler):
    @web.authenticated
    def get(self):
        course_id = self.get_query_argument("course_id", "").strip()
        if not course_id:
            raise web.HTTPError(400, "GET /grader/term needs ?course_id=COURSE")
        manager = self.settings.get("assignment_list_manager")
        if manager is None:
            raise web.HTTPError(503, "nbgrader's assignment list extension is not enabled on this server")
        self.finish(json.dumps(term_of_course(manager, course_id)))


def _jupyter_server_extension_points():
    return [{"module": "grader.lab_term"}]


def _load_jupyter_server_extension(serverapp):
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], ROUTE)
    web_app.add_handlers(".*$", [(route, TermHandler)])
    serverapp.log.info("grader: the term is served at %s", route)
