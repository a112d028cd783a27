"""The build files agree with each other and with what the README promises."""
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _name(req):
    return re.split(r"[<>=!~ \[;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_lists_every_pyproject_dependency():
    project = _pyproject()["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in ("test", "course", "distributed", "onnx"):  # what `make` installs for the library
        wanted |= {_name(r) for r in project["optional-dependencies"][extra]}
    wanted |= {_name(r) for r in _pyproject()["build-system"]["requires"]}
    text = (ROOT / "environment.yml").read_text()
    listed = {_name(m) for m in re.findall(r"^\s*-\s+([A-Za-z][\w.\-]*[^#\n]*)$", text, re.M)}
    missing = sorted(wanted - listed)
    assert not missing, f"environment.yml lacks {missing} (declared in pyproject.toml)"


def test_cuda_extras_name_cupy_builds_that_environment_yml_mentions():
    extras = _pyproject()["project"]["optional-dependencies"]
    cupys = {_name(r) for key in ("cuda12", "cuda13") for r in extras[key]}
    assert cupys == {"cupy-cuda12x", "cupy-cuda13x"}
    text = (ROOT / "environment.yml").read_text()
    for pkg in cupys:
        assert pkg in text


def test_python_floor_agrees():
    assert _pyproject()["project"]["requires-python"] == ">=3.11"
    assert "python>=3.11" in (ROOT / "environment.yml").read_text()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"^\s*(make \w[\w-]*)\s*$", ci, re.M)
    assert commands, ".ci/run runs no make target"
    for cmd in commands:
        assert f"\n{cmd}\n" in readme, f"README.md does not show `{cmd}`, which CI runs"


def test_openmp_flags_in_build():
    setup = (ROOT / "setup.py").read_text()
    assert "-fopenmp" in setup and "-O3" in setup and "NK_NATIVE" in setup
