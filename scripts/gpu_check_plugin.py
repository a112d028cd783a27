"""A pytest plugin of scripts/gpu_check.sh: each failure's reason printed as the test fails.

pytest prints the reasons in its closing summary, which a section stopped at its time limit never
reaches; with this the log holds every reason up to the stop.
"""


def pytest_runtest_logreport(report):
    if report.failed:
        text = report.longreprtext
        print(f"\nFAILED-NOW {report.nodeid} ({report.when})\n{text[-2500:]}\n", flush=True)
