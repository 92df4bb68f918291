"""tests/pgbatch.py — batches of SQL through one psql process per batch.

Shared by the differential tests (tests/differential.py,
tests/hasis_differential.py): each batch is one psql script whose queries
are separated by \\echo markers, run as the cluster's OS user (runuser when
we are root), with CSV output split back per query. Python 3 stdlib only.
"""

import csv
import io
import os
import pwd
import re
import subprocess
import sys

# psql's null display and COPY's NULL marker; never generated as data
NULL = "<NULL>"


class PsqlError(Exception):
    def __init__(self, msg, last_tag, stderr):
        super().__init__(msg)
        self.last_tag = last_tag
        self.stderr = stderr


class PG:
    """args: host, port, user, db, pgbin, os_user (argparse namespace)."""

    def __init__(self, args, prog="pgbatch"):
        self.args = args
        psql = os.path.join(args.pgbin, "psql") if args.pgbin else "psql"
        cmd = [psql, "-X", "-q", "--csv", "-t", "-P", "null=" + NULL,
               "-v", "ON_ERROR_STOP=1", "-h", args.host, "-p", str(args.port),
               "-U", args.user, "-d", args.db, "-f", "-"]
        me = pwd.getpwuid(os.geteuid()).pw_name
        if args.os_user and args.os_user != me:
            if os.geteuid() != 0:
                sys.exit("%s: must be root or %s" % (prog, args.os_user))
            cmd = ["runuser", "-u", args.os_user, "--"] + cmd
        self.cmd = cmd
        self.env = dict(os.environ)
        self.env["PGOPTIONS"] = ("-c statement_timeout=300s -c client_min_messages=warning "
                                 "-c lock_timeout=60s")
        self.calls = 0
        self.log = []     # every script run, for repro files

    def run(self, script):
        """Run a psql script; return stdout. Raise PsqlError on failure."""
        self.calls += 1
        self.log.append(script)
        p = subprocess.run(self.cmd, input=script.encode(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=self.env, cwd="/", timeout=900)
        out = p.stdout.decode(errors="replace")
        err = p.stderr.decode(errors="replace")
        if p.returncode != 0:
            tags = re.findall(r"^@@PHQ (\S+)@@$", out, re.M)
            raise PsqlError("psql exited %d: %s" % (p.returncode, err.strip()),
                            tags[-1] if tags else None, err)
        return out

    def batch(self, items):
        """items: list of (tag, sql). Returns {tag: [rows]} (rows = lists of str)."""
        parts = []
        for tag, sql in items:
            sql = sql.rstrip()
            # COPY ... FROM STDIN with its data ends with \. (no semicolon after it)
            end = "" if sql.endswith("\\.") else ";"
            parts.append("\\echo @@PHQ %s@@\n%s\n" % (tag, sql.rstrip(";") + end))
        parts.append("\\echo @@PHQ __end@@\n")
        out = self.run("".join(parts))
        res = {}
        chunks = re.split(r"^@@PHQ (\S+)@@\n", out, flags=re.M)
        # chunks = [pre, tag1, body1, tag2, body2, ...]
        for i in range(1, len(chunks) - 1, 2):
            # psql prints a one-column row holding '' as an empty line
            res[chunks[i]] = [r or [""] for r in csv.reader(io.StringIO(chunks[i + 1]))]
        return res

    def rows(self, sql):
        return self.batch([("q", sql)])["q"]
