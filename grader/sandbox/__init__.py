"""Sandboxed notebook execution: the one step of nbgrader's autograde that is replaced.

`confinement` builds the bubblewrap / unshare command line, `worker` runs inside it
(nbgrader's own Execute preprocessor driving a kernel started by `kernel_launcher`,
which applies the resource limits), `run` starts one sandboxed execution from the
host from plain settings (`RunSettings`, nothing of nbgrader), and `execute` is the
nbgrader preprocessor that ties it into the pipeline and turns a course config into
those settings. `atomic` is the one atomic-write helper, standard library only so the
worker can use it inside the sandbox; the course's `.grader/` folder is `grader.state`'s.
"""
