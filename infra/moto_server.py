"""moto server with DynamoDB requests serialised.

moto keeps its backends in plain in-process dictionaries and the stock `moto_server`
handles requests on concurrent threads without locking them, so two concurrent
conditional writes or TransactWriteItems can both pass their conditions. Real DynamoDB
(and LocalStack) apply each of them atomically, which the job store's dedup and claim
rules rely on and which the conformance suites test with concurrent requests. This
launcher runs the same WSGI application, but DynamoDB requests (`X-Amz-Target:
DynamoDB_*`) take a global lock; every other service stays concurrent, so SQS long polls
do not block anything.

Usage: python infra/moto_server.py [-H HOST] [-p PORT]
"""

import argparse
import os
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5555)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))

    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def serialised(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            with lock:
                return list(app(environ, start_response))
        return app(environ, start_response)

    run_simple(args.host, args.port, serialised, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
