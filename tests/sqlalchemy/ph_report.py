"""tests/sqlalchemy/ph_report.py — a pytest plugin for tests/sqlalchemy.sh.

Appends the node ID of every test whose setup, call or teardown failed to
the file named by PH_SQLA_FAILED, one per line, so the script can run
exactly those tests again against the heap database (the oracle) and tell
hasis's own failures from the environment's. Loaded with `-p ph_report`
(PYTHONPATH points here); reads nothing else and changes no outcome.
"""

import os


def pytest_runtest_logreport(report):
    if report.failed:
        with open(os.environ["PH_SQLA_FAILED"], "a", encoding="utf-8") as out:
            out.write(report.nodeid + "\n")
