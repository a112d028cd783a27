"""`grader`: the course's command line. Instructor commands run inside the course
directory; student commands take `--course-id` and work in the current directory.

Each command prints a short summary of what it did and exits 1 with a one-line
reason when it could not.
"""

import argparse
import datetime
import logging
import os
import sys

from grader import GraderError, __version__

log = logging.getLogger("grader")


def _parse_date(text):
    from nbgrader.utils import parse_utc

    if text == "now":
        return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    try:
        return parse_utc(text)
    except Exception:  # noqa: BLE001 - dateutil raises several types
        raise GraderError(f"cannot read the date {text!r}; use ISO 8601, e.g. 2026-03-01T23:59:00+00:00")


def _fail_on(result, what):
    if not result.get("success"):
        lines = [ln for ln in (result.get("log") or "").splitlines() if "ERROR" in ln or "CRITICAL" in ln]
        detail = "; ".join(lines) or (result.get("error") or "").strip().splitlines()[-1:]
        raise GraderError(f"{what} failed: {detail}")
    return result


# ---- instructor commands ---------------------------------------------------------------

def cmd_init(args):
    from grader.course import init_course

    course = init_course(args.directory, args.course_id, exchange=args.exchange,
                         kernel_name=args.kernel, db_url=args.db_url, packages=args.package)
    print(f"created course {course.course_id!r} in {course.root}")
    print(f"  config    {course.root / 'nbgrader_config.py'}")
    print(f"  gradebook {course.db_url_shown}")
    print(f"  exchange  {course.exchange_root}")
    print(f"  kernel    {args.kernel} (pinned); put assignments in {course.root / 'source'}/NAME/")


def cmd_doctor(args):
    from grader.course import load_course
    from grader.doctor import checks

    try:
        course = load_course()
    except GraderError:
        course = None
        print("(not in a course directory: checking the machine only)")
    results = checks(course)
    for ok, topic, detail in results:
        mark = {True: "ok  ", False: "FAIL", None: "info"}[ok]
        print(f"{mark} {topic:16} {detail}")
    failed = [topic for ok, topic, _ in results if ok is False]
    if failed:
        raise GraderError("not ready to grade: " + ", ".join(failed))
    print("ready to grade")


def _set_due(course, assignment, due):
    with course.gradebook() as gb:
        gb.update_or_create_assignment(assignment, duedate=due)


def cmd_generate(args):
    from grader.course import load_course

    course = load_course()
    if not course.path("source", args.assignment).is_dir():
        raise GraderError(f"no source/{args.assignment}/ in {course.root}")
    _fail_on(course.api().generate_assignment(args.assignment, force=True, create=True),
             f"nbgrader generate_assignment {args.assignment}")
    if args.due:
        _set_due(course, args.assignment, _parse_date(args.due))
    with course.gradebook() as gb:
        a = gb.find_assignment(args.assignment)
        due = a.duedate
        names = [nb.name for nb in a.notebooks]
        points = a.max_score
    print(f"generated release/{args.assignment}: {len(names)} notebook(s) ({', '.join(names)}), "
          f"{points:g} points; due {due or 'not set'} UTC")
    if args.no_proof:
        return
    from grader.proof import prove

    problems = []
    for proof in prove(course, args.assignment, log):
        print(f"  {proof.notebook}: the solution passes {proof.tests - len(proof.solution_failures)}"
              f"/{proof.tests} tests; the released version passes {len(proof.release_passes)}")
        if proof.solution_failures:
            problems.append(f"{proof.notebook}: the solution fails {', '.join(proof.solution_failures)}")
        if proof.release_passes and len(proof.release_passes) == proof.tests:
            problems.append(f"{proof.notebook}: the released version already passes every test")
    if problems:
        missing = _missing_in_sandbox(course, args.assignment)
        if missing:
            raise GraderError(
                f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not importable inside the "
                f"sandbox: grader init --package {' --package '.join(missing)} ..., or add "
                f"{'it' if len(missing) == 1 else 'them'} to c.Sandbox.packages in nbgrader_config.py "
                "(the assignment's tests fail without: " + "; ".join(problems) + ")")
        raise GraderError("the assignment is not ready: " + "; ".join(problems) +
                          " (fix the source, or --no-proof to skip this check)")


def _missing_in_sandbox(course, assignment) -> list:
    """Modules the assignment's notebooks import that the grading interpreter finds only
    outside what the sandbox shows (an editable install not in c.Sandbox.packages)."""
    import importlib.util
    import re

    import nbformat

    from grader.sandbox.confinement import interpreter_paths
    from grader.settings import Sandbox

    listed = set(course.section(Sandbox).packages)
    names = set()
    for path in course.path("source", assignment).glob("*.ipynb"):
        for cell in nbformat.read(str(path), as_version=4).cells:
            if cell.cell_type == "code":
                names.update(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", cell.source, re.M))
    shown = [os.path.realpath(p) for p in interpreter_paths()]
    missing = []
    for name in sorted(names - listed):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        where = spec and (list(spec.submodule_search_locations or []) or [spec.origin])[0]
        if not where or where in ("built-in", "frozen"):
            continue
        where = os.path.realpath(where)
        if not where.startswith("/usr/") and not any(where == p or where.startswith(p + os.sep) for p in shown):
            missing.append(name)
    return missing


def cmd_due(args):
    from grader.course import load_course

    course = load_course()
    if args.date:
        _set_due(course, args.assignment, _parse_date(args.date))
        _publish_term(course)
    with course.gradebook() as gb:
        due = gb.find_assignment(args.assignment).duedate
    print(f"{args.assignment} is due {due or 'never (not set)'}" + (" UTC" if due else ""))


def cmd_release(args):
    from traitlets.config import Config

    from grader.course import ensure_exchange, load_course

    course = load_course()
    ensure_exchange(course.exchange_root)
    extra = Config({"ExchangeReleaseAssignment": {"force": True}}) if args.force else None
    _fail_on(course.api(extra).release_assignment(args.assignment), f"release {args.assignment}")
    _publish_term(course)
    print(f"released {args.assignment} to {course.exchange_root}/{course.course_id}/outbound/{args.assignment}")


def cmd_collect(args):
    from grader.collect import collect
    from grader.course import load_course

    report = collect(load_course(), args.assignment, log)
    print(f"collected {len(report.students)} submission(s) of {args.assignment}; "
          f"{report.archived} new in the archive")
    for student in report.forged:
        print(f"  forged timestamp: {student} (graded on arrival time)")


def cmd_autograde(args):
    from grader.autograde import autograde
    from grader.course import load_course

    course = load_course()
    report = autograde(course, args.assignment, jobs=args.jobs, log=log)
    _publish_term(course)  # late days spent by this assignment
    print(f"autograded {len(report.scores)} submission(s) of {args.assignment} in "
          f"{report.seconds:.1f} s with {args.jobs} worker(s), sandbox {report.sandbox}; "
          f"{report.executed} new execution(s)")
    for student, (score, max_score, penalty) in sorted(report.scores.items()):
        late = f", late penalty {penalty:g}" if penalty else ""
        print(f"  {student:20} {score:g}/{max_score:g}{late}")
        for line in report.notes.get(student, []):
            print(f"      - {line}")
    if report.failed:
        raise GraderError("could not grade: " + ", ".join(f"{s} ({r})" for s, r in report.failed.items()))


def cmd_feedback(args):
    from grader.course import load_course
    from grader.feedback import feedback

    course = load_course()
    report = feedback(course, args.assignment, release=not args.no_release, log=log)
    print(f"feedback for {len(report.generated)} student(s) of {args.assignment} generated"
          + (" and released" if report.released else " (not released)"))
    if report.released:
        from grader.scores import publish_scores

        print(f"scores released to {publish_scores(course, args.assignment)} student(s) (grader score)")


def cmd_solutions(args):
    from grader.course import load_course
    from grader.solutions import solutions

    report = solutions(load_course(), args.assignment, release=not args.no_release,
                       force=args.force, log=log)
    print(f"solutions of {args.assignment} ({', '.join(report.notebooks)}) generated without "
          f"hidden tests" + (f" and released as {report.exchange_name}" if report.released else ""))


def cmd_export(args):
    from grader.course import load_course
    from grader.export import export

    count = export(load_course(), args.assignment, args.to, args.format)
    print(f"exported {count} student(s) of {args.assignment} to {args.to} ({args.format})")


# ---- the term: due dates, extensions, late days, regrades ---------------------------------

def _publish_term(course):
    """Students read due dates, extensions and late days from the exchange, not the gradebook."""
    from grader.term import publish

    try:
        publish(course)
    except OSError as err:
        log.warning("could not publish the term to the exchange: %s", err)


def cmd_comments(args):
    from grader.comment_bank import bank
    from grader.course import load_course

    known = bank(load_course())
    for name, text in sorted(known.items()):
        print(f"  {name}: {text}")
    print(f"{len(known)} comment(s) in the bank (c.CommentBank.comments in nbgrader_config.py)")


def cmd_comment(args):
    from grader.comment_bank import add_comments, clear_comment
    from grader.course import load_course

    course = load_course()
    where = f"{args.student}'s {args.assignment} {args.cell}"
    if args.clear:
        if args.names:
            raise GraderError("--clear empties the comment; name no comment with it")
        clear_comment(course, args.assignment, args.student, args.cell, args.notebook)
        print(f"cleared the comment on {where}")
        return
    text = add_comments(course, args.assignment, args.student, args.cell, args.names, args.notebook)
    print(f"the comment on {where} (the formgrader shows it):")
    for line in text.splitlines():
        print(f"  {line}")


def cmd_extend(args):
    from grader.course import load_course
    from grader.term import extensions, format_duration, grant_extension, parse_duration

    course = load_course()
    if args.student:
        if not args.duration:
            raise GraderError("give the extension's length: grader extend ASSIGNMENT STUDENT 2d (0 removes it)")
        duration = parse_duration(args.duration)
        grant_extension(course, args.assignment, args.student, duration)
        print(f"{args.student}: {args.assignment} extended by {format_duration(duration)}"
              if duration else f"{args.student}: no extension on {args.assignment}")
    found = extensions(course, args.assignment)
    if not args.student:
        with course.gradebook() as gb:
            due = gb.find_assignment(args.assignment).duedate
        for student, extension in sorted(found.items()):
            until = f", due {due + extension} UTC" if due else ""
            print(f"  {student:20} {format_duration(extension)}{until}")
        print(f"{len(found)} extension(s) of {args.assignment}")


def cmd_term(args):
    from grader.course import load_course
    from grader.late import LateRule
    from grader.term import format_duration, publish, term_record

    course = load_course()
    term, students = term_record(course)
    print(f"late work: {LateRule.from_dict(term['rule']).describe()}")
    for name, due in term["due"].items():
        print(f"  {name:12} due {due or 'not set'}")
    for student, record in sorted(students.items()):
        spent = ", ".join(f"{a} {n}" for a, n in record["late_days_used"].items()) or "none"
        ext = ", ".join(f"{a} +{format_duration(datetime.timedelta(seconds=s))}"
                        for a, s in record["extensions"].items()) or "none"
        print(f"  {student:20} late days used: {spent}; left {record['late_days_left']}; extensions: {ext}")
    print(f"published to {publish(course)}")


def cmd_regrades(args):
    from grader.course import load_course
    from grader.regrade import requests, resolve

    course = load_course()
    words = list(args.words)
    if words and words[0] == "resolve":
        if len(words) != 2 or not args.note:
            raise GraderError('grader regrades resolve ID --note "..." [--points N]')
        done = resolve(course, words[1], args.note, args.points)
        print(f"resolved {done.id} ({done.student}, {done.assignment} {done.part})"
              + (f": {done.part} now {args.points:g} point(s)" if args.points is not None else ""))
        if done.feedback_rereleased:
            print(f"feedback of {done.assignment} released again to {done.student}")
        return
    found = requests(course, words[0] if words else None)
    for r in found:
        state = "resolved: " + r.resolution["note"] if r.resolution else "open"
        check = "" if r.verified else " UNVERIFIED (no proof from this student's submission)"
        print(f"  {r.id} {r.student:16} {r.assignment}:{r.part} filed {r.filed_at[:16]} by {r.filed_by}"
              f"{check} [{state}]\n      {r.reason}")
    print(f"{len(found)} regrade request(s), {sum(1 for r in found if not r.resolution)} open")


def cmd_similarity(args):
    from grader.course import load_course
    from grader.similarity import similarity, similarity_lines

    report = similarity(load_course(), args.assignment)
    lines = similarity_lines(report)
    for line in lines:
        print(line)
    print(f"{len(report.package)} copy(ies) of the package's code, {len(report.lectures)} of the lectures', "
          f"{len(report.shared)} pair(s) of submissions sharing code, {report.common} common solution(s) "
          f"left out, {len(report.suspicious)} suspicious construct(s); "
          "recorded as instructor notes (grader export shows them)")


def cmd_roster(args):
    from grader.course import load_course
    from grader.export import import_roster

    print(f"added or updated {import_roster(load_course(), args.file)} student(s) from {args.file}")


# ---- student commands ----------------------------------------------------------------

def _print_term(args):
    from grader.student import term_status

    for line in term_status(args.assignment, args.course_id, args.exchange, args.student):
        print(f"  {line}")


def cmd_fetch(args):
    from grader.student import fetch

    print(f"fetched {args.assignment} into {fetch(args.assignment, args.course_id, args.exchange, args.student)}")
    _print_term(args)


def cmd_submit(args):
    from grader.student import lateness, submit

    late = lateness(args.assignment, args.course_id, args.exchange, args.student)
    if late:
        print(late)
        if not args.yes and sys.stdin.isatty():
            if input("submit anyway? [y/N] ").strip().lower() not in ("y", "yes"):
                raise GraderError(f"{args.assignment} not submitted")
    who = submit(args.assignment, args.course_id, args.exchange, args.student)
    print(f"submitted {args.assignment} for {args.course_id} as {who}")


def cmd_score(args):
    from grader.student import my_regrades, my_score

    record = my_score(args.assignment, args.course_id, args.exchange, args.student)
    for part in record["parts"]:
        pending = " (not graded yet)" if part["needs_manual_grade"] else ""
        score = "-" if part["score"] is None else f"{part['score']:g}"
        print(f"  {part['notebook']}:{part['part']:24} {score}/{part['max_score']:g}{pending}")
    if record["late_penalty"]:
        print(f"  late penalty: -{record['late_penalty']:g} ({record['late']})")
    print(f"{args.assignment}: {record['score']:g}/{record['max_score']:g}")
    for r in my_regrades(args.assignment, args.course_id, args.exchange, args.student):
        answer = r["reply"]
        state = (f"answered: {answer['note']}" + (f" ({answer['points']:g} point(s))" if answer.get("points")
                                                   is not None else "")) if answer else "open"
        print(f"  regrade request {r['id']} on {r['part']}: {state}")


def cmd_regrade(args):
    from grader.student import regrade

    rid = regrade(args.assignment, args.part, args.reason, args.course_id, args.exchange, args.student)
    print(f"filed regrade request {rid} on {args.assignment} part {args.part}; "
          f"`grader score {args.assignment}` shows the answer")


def cmd_validate(args):
    from grader.student import validate

    if args.course_id:
        _print_term(args)
    results = validate(args.assignment)
    for name, problems, found in results:
        print(f"  {name}: " + ("passes its visible tests" if not problems else f"{problems} problem(s)"))
        for kind, cells in sorted(found.items()):
            for cell in cells:
                source = cell.get("source", "") if isinstance(cell, dict) else str(cell)
                print(f"      {kind.replace('_', ' ')}: {source.strip().splitlines()[0][:70] if source.strip() else '(empty cell)'}")
    bad = sum(p for _, p, _ in results)
    if bad:
        raise GraderError(f"{args.assignment}: {bad} problem(s): failing visible tests, unanswered "
                          "questions or changed locked cells")
    print(f"{args.assignment}: all visible tests pass")


def cmd_fetch_feedback(args):
    from grader.student import fetch_feedback

    pages = fetch_feedback(args.assignment, args.course_id, args.exchange, args.student)
    print(f"fetched feedback for {args.assignment}: " + ", ".join(pages))


def cmd_list(args):
    from grader.student import FEEDBACK_STATES, assignment_list, term_status

    listed = [entry for entry in assignment_list(args.course_id, args.exchange, args.student)
              if args.assignment in (None, entry[0])]
    if not listed:
        raise GraderError(f"{args.assignment} is not released in {args.course_id}" if args.assignment
                          else f"nothing is released in {args.course_id} yet")
    shown = set()
    for assignment, status, feedback in listed:
        print(f"{assignment} {status}" + (f": {FEEDBACK_STATES[feedback]}" if status == "submitted" else ""))
        if assignment not in shown:
            shown.add(assignment)
            for line in term_status(assignment, args.course_id, args.exchange, args.student):
                print(f"  {line}")


def cmd_fetch_solutions(args):
    from grader.student import fetch_solutions

    print(f"fetched the solutions of {args.assignment} into "
          f"{fetch_solutions(args.assignment, args.course_id, args.exchange, args.student)}")


def build_parser():
    parser = argparse.ArgumentParser(prog="grader", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"grader {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show nbgrader's log")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, func, help, assignment=True):
        p = sub.add_parser(name, help=help, description=help)
        if assignment:
            p.add_argument("assignment")
        p.set_defaults(func=func)
        return p

    p = command("init", cmd_init, "create a course directory with its nbgrader config", assignment=False)
    p.add_argument("directory")
    p.add_argument("--course-id", required=True)
    p.add_argument("--exchange", help="exchange root (default /srv/nbgrader/exchange)")
    p.add_argument("--kernel", default="python3", help="the pinned kernelspec name")
    p.add_argument("--db-url", help="SQLAlchemy URL of the gradebook (default: sqlite in the course)")
    p.add_argument("--package", action="append", default=[],
                   help="a development-mode package submissions import (repeatable); needle_kernels "
                        "and coursekit are always added where this interpreter can import them")
    command("doctor", cmd_doctor, "check sandbox, exchange, kernel and gradebook", assignment=False)
    p = command("generate", cmd_generate, "make the student version (nbgrader generate_assignment)")
    p.add_argument("--due", help="due date, ISO 8601 (UTC unless it says otherwise) or 'now'")
    p.add_argument("--no-proof", action="store_true",
                   help="skip running the solution and the released version in the sandbox")
    p = command("due", cmd_due, "show or set the due date")
    p.add_argument("date", nargs="?")
    p = command("release", cmd_release, "release the assignment to the exchange")
    p.add_argument("--force", action="store_true", help="replace an earlier release")
    command("collect", cmd_collect, "collect submissions (every one is archived)")
    p = command("autograde", cmd_autograde, "grade collected submissions in sandboxes")
    p.add_argument("-j", "--jobs", type=int, default=1, help="parallel sandboxes")
    p = command("feedback", cmd_feedback, "generate and release feedback")
    p.add_argument("--no-release", action="store_true")
    p = command("solutions", cmd_solutions, "generate and release solutions (after the due date)")
    p.add_argument("--force", action="store_true", help="release before the due date")
    p.add_argument("--no-release", action="store_true")
    p = command("export", cmd_export, "write the grades as CSV, ours or an LMS's import format")
    p.add_argument("--to", required=True, help="output CSV file")
    p.add_argument("--format", default="csv", choices=["csv", "canvas", "moodle", "gradescope"],
                   help="csv: every part and the late policy applied; canvas, moodle, gradescope: "
                        "the file each system's grade import reads")
    p = command("extend", cmd_extend, "give a student an extension (none given: list the extensions)")
    p.add_argument("student", nargs="?")
    p.add_argument("duration", nargs="?", help="e.g. 2d, 36h, 1d12h, 90m; 0 removes it")
    command("comments", cmd_comments, "list the comment bank (c.CommentBank.comments)", assignment=False)
    p = command("comment", cmd_comment, "add comments of the bank to a student's answer, as the formgrader's "
                "comment box holds them")
    p.add_argument("student")
    p.add_argument("cell", help="the answer's cell name (its grade id)")
    p.add_argument("names", nargs="*", help="names of comments in the bank")
    p.add_argument("--notebook", help="the notebook, when several have a cell of that name")
    p.add_argument("--clear", action="store_true", help="empty the answer's comment")
    command("term", cmd_term, "show the late rule, due dates, extensions and late days, and publish them "
            "to the students", assignment=False)
    p = command("regrades", cmd_regrades, "list regrade requests ([ASSIGNMENT]), or answer one "
                "(resolve ID --note TEXT [--points N])", assignment=False)
    p.add_argument("words", nargs="*", metavar="ASSIGNMENT | resolve ID")
    p.add_argument("--note", help="the answer the student sees")
    p.add_argument("--points", type=float, help="the part's new score")
    command("similarity", cmd_similarity,
            "find solutions that are the package's code, a lecture's or another student's (instructor notes)")
    p = command("roster", cmd_roster, "add students from a CSV (id, first_name, last_name, email, lms_user_id)",
                assignment=False)
    p.add_argument("file")

    for name, func, help in [
        ("fetch", cmd_fetch, "fetch a released assignment"),
        ("validate", cmd_validate, "run the visible tests of ./ASSIGNMENT"),
        ("submit", cmd_submit, "submit ./ASSIGNMENT"),
        ("fetch-feedback", cmd_fetch_feedback, "fetch released feedback"),
        ("fetch-solutions", cmd_fetch_solutions, "fetch released solutions"),
        ("score", cmd_score, "your released score of ASSIGNMENT, part by part, and your regrade requests"),
        ("regrade", cmd_regrade, "ask for one part of ASSIGNMENT to be regraded"),
        ("list", cmd_list, "the course's assignments: due dates, submissions, whether feedback changed"),
    ]:
        p = command(name, func, help, assignment=name != "list")
        if name == "list":
            p.add_argument("assignment", nargs="?", help="only this assignment")
        if name == "submit":
            p.add_argument("--yes", action="store_true",
                           help="submit after the due date without asking; what it costs is still "
                                "printed (without a terminal it is never asked)")
        if name == "regrade":
            p.add_argument("--part", required=True, help="the part's grade id, as `grader score` lists it")
            p.add_argument("--reason", required=True)
        # validate works on the local copy alone; it takes the same options so that every
        # student command can be typed the same way
        p.add_argument("--course-id", required=name != "validate")
        p.add_argument("--exchange", help="exchange root (default /srv/nbgrader/exchange)")
        p.add_argument("--student", help="student name (default: the logged-in user)")
    return parser


def _tools_on_path():
    """nbgrader runs `alembic` (to check the gradebook schema) from PATH: use this
    environment's, also when the grader is started as .venv/bin/grader without activation."""
    here = os.path.dirname(sys.executable)
    if here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    _tools_on_path()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="[%(levelname)s] %(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    for handler in logging.getLogger().handlers:
        # nbgrader's apps log at INFO through their own loggers; only -v shows that
        handler.setLevel(logging.INFO if args.verbose else logging.WARNING)
    for noisy in ("traitlets", "NbGraderAPI", "grader.nbgrader"):
        logging.getLogger(noisy).setLevel(logging.INFO if args.verbose else logging.ERROR)
    try:
        args.func(args)
    except GraderError as err:
        print(f"grader {args.command}: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a missing roster, an unreadable folder: say which file, no traceback
        where = f": {err.filename}" if err.filename else ""
        print(f"grader {args.command}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"grader {args.command}: interrupted; run it again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
