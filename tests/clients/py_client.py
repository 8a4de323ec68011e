#!/usr/bin/env python3
"""py_client.py — redis-py (Debian's python3-redis) against sluice's RESP
port, with the library's default settings, for resp_clients.sh.

    py_client.py PORT basic          connect, pipeline, transaction, errors
    py_client.py PORT reconnect DIR  one command, then DIR/down is awaited
                                     (the test restarts sluice), then
                                     commands until one succeeds again

Prints one line per check: "ok NAME" or "FAIL NAME: why".
"""
import os
import sys
import time

import redis


def check(name, fn):
    try:
        got = fn()
        print("ok " + name if got is True else "FAIL %s: got %r" % (name, got))
    except Exception as e:  # a check that raised is a failed check
        print("FAIL %s: %s: %s" % (name, type(e).__name__, e))
    sys.stdout.flush()


def raises(fn, kind, text):
    try:
        fn()
    except kind as e:
        return True if text in str(e) else "wrong message %r" % str(e)
    return "no %s" % kind.__name__


def basic(r):
    check("connect (PING)", lambda: r.ping())
    check("CL.THROTTLE, redis-cell's figures",
          lambda: r.execute_command("CL.THROTTLE", "py:a:%d" % os.getpid(), 15, 30, 60)
          == [0, 16, 15, -1, 2])
    p = r.pipeline()  # transaction=True: MULTI ... EXEC
    for _ in range(3):
        p.execute_command("CL.THROTTLE", "py:t:%d" % os.getpid(), 1, 1, 60)
    check("pipeline() is a transaction, replies in order",
          lambda: [x[0] for x in p.execute()] == [0, 0, 1])
    p = r.pipeline(transaction=False)
    for k in ("py:n1", "py:n2"):
        p.execute_command("SL.THROTTLE", k, "gcra:10/s")
    check("pipeline(transaction=False)",
          lambda: [x[0] for x in p.execute()] == [1, 1])
    check("a denied command's error is a ResponseError",
          lambda: raises(lambda: r.execute_command("CL.THROTTLE", "k", 1, 0, 1),
                         redis.ResponseError,
                         "Cell error: Store error: Zero rates are not supported"))

    def failing_in_transaction():
        p = r.pipeline()
        p.execute_command("CL.THROTTLE", "py:e", "x", 1, 1)
        p.execute_command("PING")
        return p.execute()
    check("an error inside EXEC is raised",
          lambda: raises(failing_in_transaction, redis.ResponseError,
                         "Couldn't parse as integer: x"))

    def aborted():
        p = r.pipeline()
        p.execute_command("NOSUCH")
        p.execute_command("PING")
        return p.execute()
    check("a queueing error aborts EXEC",
          lambda: raises(aborted, redis.ResponseError, "NOSUCH"))
    check("the connection is fine after it", lambda: r.ping())
    check("INFO: total_commands_processed",
          lambda: r.info().get("total_commands_processed", 0) > 0)
    check("INFO clients: only that section",
          lambda: set(r.info("clients")) >= {"connected_clients",
                                             "blocked_clients"}
          and "used_memory" not in r.info("clients"))
    check("CLIENT ID", lambda: isinstance(r.client_id(), int))
    check("CLIENT SETNAME / GETNAME",
          lambda: r.client_setname("py") and r.client_getname() in ("py", b"py"))
    check("TIME", lambda: abs(r.time()[0] - time.time()) < 60)
    check("ECHO", lambda: r.echo("hi") == b"hi")


def reconnect(r, d):
    check("connected before the restart", lambda: r.ping())
    open(os.path.join(d, "py.ready"), "w").close()
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(d, "restarted")):
        if time.time() > deadline:
            print("FAIL reconnect: sluice never came back")
            return
        time.sleep(0.1)
    last = None
    while time.time() < deadline:
        try:
            if r.ping():
                print("ok reconnects after sluice restarted")
                return
        except redis.ConnectionError as e:
            last = e
        time.sleep(0.1)
    print("FAIL reconnect: %s" % last)


if __name__ == "__main__":
    client = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
    if sys.argv[2] == "basic":
        basic(client)
    else:
        reconnect(client, sys.argv[3])
