"""Grades as each learning management system imports them: one assignment per file.

Each format's identity columns are the ones its own grade export writes, because each
system imports the layout it exports:

- Canvas (Gradebook > Import: its export's "Student, ID, SIS User ID, SIS Login ID, Section",
  one column per assignment and a "Points Possible" row; the required columns are listed in
  teaching.resources.osu.edu, "Import a CSV file to Carmen grades"): students are matched on
  ID (Canvas's user id,
  the roster's `lms_user_id`) or SIS Login ID (the account name). A column named
  `NAME (CANVAS_ID)` updates that assignment (`c.LmsExport.canvas_assignment_ids`);
  otherwise Canvas creates one.
- Moodle (Grade administration > Import > CSV file; docs.moodle.org, "Grade import": the
  import file has the export's layout, and the user is found by mapping a column to
  `useremail` or `useridnumber`): the plain-text export's columns, then the assignment.
- Gradescope (roster "Name, Email, SID", help.gradescope.com "Adding students and staff";
  its score exports add "Total Score" and "Max Points").

Students who did not submit get an empty score, which every one of them imports as "no
change" rather than a zero.
"""

CANVAS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
MOODLE = ["First name", "Last name", "ID number", "Institution", "Department", "Email address"]
GRADESCOPE = ["Name", "SID", "Email", "Total Score", "Max Points"]

FORMATS = ("csv", "canvas", "moodle", "gradescope")


def number(value):
    """A score as every format writes it: shortest form, empty for none."""
    return "" if value is None else f"{float(value):g}"


def canvas(assignment, max_score, students, canvas_id=None):
    """Rows (header first) of a Canvas gradebook import."""
    column = f"{assignment} ({canvas_id})" if canvas_id else assignment
    rows = [CANVAS + [column], [CANVAS_POINTS_ROW, "", "", "", "", number(max_score)]]
    for s in students:
        rows.append([f"{s['last_name']}, {s['first_name']}".strip(", "), s["lms_user_id"], "",
                     s["student_id"], "", number(s["score"])])
    return rows


def moodle(assignment, max_score, students):
    rows = [MOODLE + [assignment]]
    for s in students:
        rows.append([s["first_name"], s["last_name"], s["lms_user_id"], "", "", s["email"], number(s["score"])])
    return rows


def gradescope(assignment, max_score, students):
    rows = [list(GRADESCOPE)]
    for s in students:
        name = " ".join(part for part in (s["first_name"], s["last_name"]) if part) or s["student_id"]
        rows.append([name, s["lms_user_id"] or s["student_id"], s["email"], number(s["score"]),
                     number(max_score) if s["score"] is not None else ""])
    return rows
