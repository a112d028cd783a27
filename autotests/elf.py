"""What a compiled module holds, read with binutils' readelf."""
import subprocess


def assert_built_without_debug_information(module):
    """``module`` (a path to a shared object) has code and no DWARF debug information."""
    sections = subprocess.run(["readelf", "-S", str(module)], capture_output=True, text=True, check=True).stdout
    assert ".text" in sections and ".debug_info" not in sections, module
