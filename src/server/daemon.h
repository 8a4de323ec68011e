/*
 * daemon.h — `sluice serve`, as the command line reaches it: the one
 * entry point of the daemon that the CLI layer calls (it needs nothing of
 * h2o or the engine to do so).
 */
#ifndef SLUICE_SERVER_DAEMON_H
#define SLUICE_SERVER_DAEMON_H

/* Runs the daemon with sluice serve's arguments (argv[0] "serve") until a
   signal stops it; returns the exit status. */
int serve_main(int argc, char **argv);

#endif /* SLUICE_SERVER_DAEMON_H */
