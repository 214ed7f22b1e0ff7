#!/usr/bin/env python3
"""FAKE tile_example_fmha_fwd / _bwd for ckfmha's runner tests -- NOT CK.  The tests copy this file to
``<tmp>/tile_example_fmha_fwd`` (and ``_bwd``), make it executable, and drive it with environment variables:

FAKE_TILE_STDOUT   text printed on stdout (recorded lines)       FAKE_TILE_STDERR  text printed on stderr
FAKE_TILE_RC       exit status (default 0)                       FAKE_TILE_SLEEP   seconds to sleep first
FAKE_TILE_JSON     text written to the -jsonfile=PATH argument   FAKE_TILE_ARGV    file that receives argv (JSON)
FAKE_TILE_CHILD    file that receives the pid of a sleeping child process (to check process-group kills)
"""

import json
import os
import subprocess
import sys
import time

env = os.environ
if env.get("FAKE_TILE_ARGV"):
    with open(env["FAKE_TILE_ARGV"], "w") as fh:
        json.dump(sys.argv, fh)
if env.get("FAKE_TILE_CHILD"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(env["FAKE_TILE_CHILD"], "w") as fh:
        fh.write(str(child.pid))
if env.get("FAKE_TILE_JSON") is not None:
    for a in sys.argv[1:]:
        if a.startswith("-jsonfile="):
            with open(a.split("=", 1)[1], "w") as fh:
                fh.write(env["FAKE_TILE_JSON"])
time.sleep(float(env.get("FAKE_TILE_SLEEP", "0")))
sys.stdout.write(env.get("FAKE_TILE_STDOUT", ""))
sys.stdout.flush()
sys.stderr.write(env.get("FAKE_TILE_STDERR", ""))
sys.exit(int(env.get("FAKE_TILE_RC", "0")))
