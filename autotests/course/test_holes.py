"""A submission that passes a test without doing its work earns nothing for it: proven by grading
such submissions.

Each one is the instructor's solution with one solution cell rewritten, graded with ``grader
autograde -j 2`` in the sandbox; every other cell keeps the full points the solution earns
(``test_own_work.py`` proves those on the same grading):

* hw4x: a ``Transformer`` that passes its input through, and one whose layers are feed-forward
  blocks applied to each position alone, with no attention. The language model around either still
  learns which word follows which, so a test that only asks for a falling loss would pass; the
  language-model test (hw4x_t4) asks for what only attention to earlier words can do, and gives both
  nothing.
* hw3: a ``matmul`` made slow on purpose and a ``matmul_tiled`` that is the plain algorithm on the
  tiled layout. Both are correct, so the correctness test gives its points; the speed point
  measures ``matmul_tiled`` against the course's own plain matmul on the tiled layout, not the
  notebook's ``matmul``, and gives nothing.
"""
import sys

import pytest

from class_grading import autograded_errors, class_course, submit
from nbhelpers import REPO

sys.path.insert(0, str(REPO / "autotests" / "grader"))
from grader_testkit import gradebook_scores, grader, run_once  # noqa: E402

from test_own_work import cells_of, meta, points, printed_ratios, source_nb  # noqa: E402

sys.path.insert(0, str(REPO / "autotests"))
from figures import report_figure  # noqa: E402

IDENTITY_TRANSFORMER = '''class Transformer(nn.Module):
    """Passes its input through: the language model around it sees each word alone."""
    def __init__(self, embedding_size, hidden_size, num_layers, *, num_head=8, dim_head=32, dropout=0.0,
                 causal=True, device=None, dtype="float32", batch_first=False, sequence_len=2048):
        super().__init__()

    def forward(self, x, h=None):
        return x, init.zeros_like(x)'''

FEED_FORWARD_TRANSFORMER = '''class Transformer(nn.Module):
    """A positional embedding, then residual feed-forward blocks applied to each position alone."""
    def __init__(self, embedding_size, hidden_size, num_layers, *, num_head=8, dim_head=32, dropout=0.0,
                 causal=True, device=None, dtype="float32", batch_first=False, sequence_len=2048):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.batch_first = batch_first
        self.pos_embedding = nn.Embedding(sequence_len, embedding_size, **kw)
        self.layers = nn.Sequential(*[
            nn.Sequential(nn.LayerNorm1d(embedding_size, **kw), nn.Linear(embedding_size, hidden_size, **kw),
                          nn.ReLU(), nn.Linear(hidden_size, embedding_size, **kw))
            for _ in range(num_layers)])

    def forward(self, x, h=None):
        if not self.batch_first:
            x = ndl.transpose(x, (0, 1))
        B, T = x.shape[0], x.shape[1]
        ids = np.repeat(np.arange(T, dtype=np.float32).reshape(T, 1), B, axis=1)
        x = x + ndl.transpose(self.pos_embedding(Tensor(ids, device=x.device, requires_grad=False)), (0, 1))
        for block in self.layers.modules:
            x = x + block(x)
        if not self.batch_first:
            x = ndl.transpose(x, (0, 1))
        return x, init.zeros_like(x)'''

# matmul repeats its work to be slow; matmul_tiled walks the tiled layout one dot product at a time
SLOW_PLAIN_MATMULS = '''%%cython --compile-args=-fopenmp --compile-args=-O3 --link-args=-fopenmp
# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3

from cython.parallel import prange

DEF T = 8


def matmul(a, b, out, m, n, p):
    cdef const float[::1] A = a.array
    cdef const float[::1] B = b.array
    cdef float[::1] O = out.array
    cdef Py_ssize_t M = m, N = n, P = p, i, j, k, again
    cdef float acc
    for i in prange(M, nogil=True, schedule="static"):
        for j in range(P):
            for again in range(4):
                acc = 0.0
                for k in range(N):
                    acc = acc + A[i * N + k] * B[k * P + j]
            O[i * P + j] = acc


def matmul_tiled(a, b, out, m, n, p):
    cdef const float[::1] A = a.array
    cdef const float[::1] B = b.array
    cdef float[::1] O = out.array
    cdef Py_ssize_t NT = n // T, PT = p // T, M = m, N = n, P = p, r, c, k
    cdef float acc
    for r in prange(M, nogil=True, schedule="static"):
        for c in range(P):
            acc = 0.0
            for k in range(N):
                acc = acc + (A[((r // T) * NT + k // T) * T * T + (r % T) * T + k % T]
                             * B[((k // T) * PT + c // T) * T * T + (k % T) * T + c % T])
            O[((r // T) * PT + c // T) * T * T + (r % T) * T + c % T] = acc'''

# {assignment: {student: ({solution cell's grade id: its new source}, grade ids that must earn nothing)}}
HOLES = {
    "hw4x": {
        "identity_transformer": ({"hw4x_t4_transformer": IDENTITY_TRANSFORMER},
                                 {"hw4x_t4_tests_transformer", "hw4x_t4_tests_language_model"}),
        "feed_forward_transformer": ({"hw4x_t4_transformer": FEED_FORWARD_TRANSFORMER},
                                     {"hw4x_t4_tests_transformer", "hw4x_t4_tests_language_model"}),
    },
    "hw3": {
        "slow_plain_matmuls": ({"hw3_t4_matmul": SLOW_PLAIN_MATMULS}, {"hw3_t4_tests_speed"}),
    },
}


def submission(aid, sources):
    nb = source_nb(aid)
    found = set()
    for cell in nb.cells:
        gid = meta(cell).get("grade_id")
        if meta(cell).get("solution") and gid in sources:
            cell.source = sources[gid]
            found.add(gid)
    assert found == set(sources), f"{aid}: no solution cells {set(sources) - found}"
    return nb


def grade_class(root, aid):
    """Each submission of HOLES[aid], autograded with -j 2: {student: {grade id: score}} and the
    error each autograded cell printed."""
    course, home = class_course(root, aid)
    subs = {student: submission(aid, sources) for student, (sources, _) in HOLES[aid].items()}
    submit(course, aid, subs)
    grader(["autograde", aid, "-j", "2"], course, home, timeout=3000)
    # a speed check prints the ratio a hole measured: how far below the bar it stays on this CPU
    for student in subs:
        for line in printed_ratios(course / "autograded" / student / aid / f"{aid}.ipynb"):
            report_figure(f"{aid} hole {student}, graded: {line}")
    return {"scores": gradebook_scores(course, aid), "errors": autograded_errors(course, aid, subs, tail=400)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    cache = {}

    def get(aid):
        if aid not in cache:
            cache[aid] = run_once(tmp_path_factory, f"holes_{aid}",
                                  lambda: grade_class(tmp_path_factory.mktemp(f"holes_{aid}"), aid))
        return cache[aid]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("aid, student", [(aid, s) for aid in sorted(HOLES) for s in HOLES[aid]])
def test_a_hole_earns_nothing(aid, student, graded):
    result = graded(aid)
    nothing = HOLES[aid][student][1]
    want = {g: (0.0 if g in nothing else p) for g, p in points(aid).items()}
    got = cells_of(result["scores"], student)
    assert got == want, f"{aid} {student}: the grades are {got}, expected {want}\n{result['errors'].get(student)}"
