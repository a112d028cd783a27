/**
 * The term in nbgrader's assignment list: under each row of the Assignments panel,
 * the lines `grader fetch` prints (due date in the student's zone, their extension,
 * late days left) and a note when released feedback changed since it was fetched.
 *
 * nbgrader's panel is its own plain DOM, rebuilt whenever it refreshes, with no hook
 * to extend, so the rows are watched: each row names its assignment (`.item_name`)
 * and course (`.item_course`), and the lines come from GET /grader/term (grader/lab_term.py).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

interface AssignmentTerm {
  lines: string[];
  feedback_updated: boolean;
}

interface CourseTerm {
  course_id: string;
  assignments: { [assignment: string]: AssignmentTerm };
}

const LISTS = ['released_assignments_list', 'fetched_assignments_list', 'submitted_assignments_list'];
const MARK = 'grader-term';

const settings = ServerConnection.makeSettings();
// the first child of each row annotated: nbgrader makes a new one whenever it redraws a row
const annotated = new WeakSet<Element>();

async function courseTerm(courseId: string): Promise<CourseTerm | null> {
  const url = URLExt.join(settings.baseUrl, 'grader/term') + '?course_id=' + encodeURIComponent(courseId);
  try {
    const response = await ServerConnection.makeRequest(url, {}, settings);
    if (response.ok) {
      return (await response.json()) as CourseTerm;
    }
    console.warn(`grader-term: GET ${url} answered ${response.status}`);
  } catch (error) {
    console.warn('grader-term:', error);
  }
  return null;
}

function rowsOfLists(): HTMLElement[] {
  const rows: HTMLElement[] = [];
  for (const id of LISTS) {
    const list = document.getElementById(id);
    if (list) {
      list.querySelectorAll<HTMLElement>(':scope > .list_item').forEach(row => rows.push(row));
    }
  }
  return rows;
}

function lines(term: AssignmentTerm, submitted: boolean): HTMLElement {
  const box = document.createElement('div');
  box.classList.add(MARK);
  for (const text of term.lines) {
    const line = document.createElement('div');
    line.classList.add('grader-term-line');
    line.textContent = text;
    box.append(line);
  }
  // on the submitted row, beside nbgrader's own "(feedback ready to be fetched)" and its button
  if (submitted && term.feedback_updated) {
    const note = document.createElement('div');
    note.classList.add('grader-term-line', 'grader-term-feedback');
    note.textContent = 'feedback changed since you fetched it: fetch it again';
    box.append(note);
  }
  return box;
}

/** Add the term's lines to a row not annotated yet; `asked` holds this redraw's requests,
 * so the rows nbgrader draws together share one request per course. */
async function annotate(row: HTMLElement, asked: Map<string, Promise<CourseTerm | null>>): Promise<void> {
  const head = row.firstElementChild;
  const name = head?.querySelector(':scope > .item_name')?.firstElementChild?.textContent?.trim();
  const course = head?.querySelector(':scope > .item_course')?.textContent?.trim();
  if (!head || !name || !course || annotated.has(head)) {
    return;
  }
  annotated.add(head);
  if (!asked.has(course)) {
    asked.set(course, courseTerm(course));
  }
  const term = (await asked.get(course))?.assignments[name];
  if (term && row.firstElementChild === head) {
    row.querySelectorAll(`:scope > .${MARK}`).forEach(old => old.remove());
    // after the row's own line, before the collapsible notebooks nbgrader puts below it
    head.after(lines(term, row.parentElement?.id === 'submitted_assignments_list'));
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'grader-term:plugin',
  description: "Due date, extension and late days in each row of nbgrader's assignment list",
  autoStart: true,
  activate: (_app: JupyterFrontEnd) => {
    let pending = false;
    const observer = new MutationObserver(() => {
      if (pending) {
        return;
      }
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        const asked = new Map<string, Promise<CourseTerm | null>>();
        rowsOfLists().forEach(row => void annotate(row, asked));
      });
    });
    observer.observe(document.body, { childList: true, subtree: true });
  }
};

export default plugin;
