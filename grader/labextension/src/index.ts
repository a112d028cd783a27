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
// the panel refreshes after every fetch and submit: one answer per course serves a refresh's rows
const FRESH_MS = 3000;

const settings = ServerConnection.makeSettings();
const answers = new Map<string, { at: number; term: Promise<CourseTerm | null> }>();

async function courseTerm(courseId: string): Promise<CourseTerm | null> {
  const url = URLExt.join(settings.baseUrl, 'grader/term') + '?course_id=' + encodeURIComponent(courseId);
  const response = await ServerConnection.makeRequest(url, {}, settings);
  if (!response.ok) {
    console.warn(`grader-term: GET ${url} answered ${response.status}`);
    return null;
  }
  return (await response.json()) as CourseTerm;
}

function termOf(courseId: string): Promise<CourseTerm | null> {
  const known = answers.get(courseId);
  if (known && Date.now() - known.at < FRESH_MS) {
    return known.term;
  }
  const term = courseTerm(courseId).catch(error => {
    console.warn('grader-term:', error);
    return null;
  });
  answers.set(courseId, { at: Date.now(), term });
  return term;
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

async function annotate(row: HTMLElement): Promise<void> {
  const name = row.querySelector(':scope > div > .item_name')?.firstElementChild?.textContent?.trim();
  const course = row.querySelector(':scope > div > .item_course')?.textContent?.trim();
  if (!name || !course) {
    return;
  }
  const key = `${course}/${name}`;
  if (row.dataset.graderTerm === key && row.querySelector(`:scope > .${MARK}`)) {
    return;
  }
  row.dataset.graderTerm = key;
  const term = (await termOf(course))?.assignments[name];
  row.querySelectorAll(`:scope > .${MARK}`).forEach(old => old.remove());
  if (term && row.dataset.graderTerm === key) {
    // after the row's own line, before the collapsible notebooks nbgrader puts below it
    row.firstElementChild?.after(lines(term, row.parentElement?.id === 'submitted_assignments_list'));
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
        rowsOfLists().forEach(row => void annotate(row));
      });
    });
    observer.observe(document.body, { childList: true, subtree: true });
  }
};

export default plugin;
