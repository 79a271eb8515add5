"""Run the testbench's REST server (no gRPC server, no gunicorn) on 127.0.0.1:PORT until
killed: ``python serve.py PORT`` with this directory first on PYTHONPATH (its ``google/``
holds the generated Storage protos; ``crc32c.py`` and ``scalpl.py`` stand in for two small
packages)."""

import logging
import sys

from werkzeug.serving import make_server

from testbench import rest_server

logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = make_server("127.0.0.1", int(sys.argv[1]), rest_server.server, threaded=True)
server.serve_forever()
