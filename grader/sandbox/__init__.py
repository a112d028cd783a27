"""Sandboxed notebook execution: the one step of nbgrader's autograde that is replaced.

`confinement` builds the bubblewrap / unshare command line, `worker` runs inside it
(nbgrader's own Execute preprocessor driving a kernel started by `kernel_launcher`,
which applies the resource limits), `run` starts one sandboxed execution from the
host, and `execute` is the nbgrader preprocessor that ties it into the pipeline.
"""
