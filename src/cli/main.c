/*
 * main.c — the `sluice` binary: one program, one subcommand per job.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../server/daemon.h"
#include "cli.h"
#include "sluice.h"

static const struct {
  const char *name;
  int (*run)(int, char **);
  const char *what;
} commands[] = {
    {"replay", cmd_replay, "decide a trace of requests under a policy"},
    {"serve", serve_main, "run the daemon: HTTP and Redis-protocol front ends"},
    {"check-config", cmd_check_config, "validate a YAML config, FILE:LINE:COL errors"},
    {"bench", cmd_bench, "measure decisions per second and bytes per key"},
    {"sim", cmd_sim, "run a scenario against policies side by side"},
    {"accuracy", cmd_accuracy, "judge every algorithm against the ideal sliding limit"},
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: sluice COMMAND [OPTIONS]\n"
          "\n"
          "sluice is a rate limiter: six exact algorithms over a bounded\n"
          "in-memory key store.\n"
          "\n"
          "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-13s %s\n", commands[i].name, commands[i].what);
  fprintf(f,
          "  %-13s print the version\n"
          "\n"
          "Run 'sluice COMMAND --help' for a command's options.\n"
          "Policies are written ALGORITHM:LIMIT/PERIOD[:burst=N], e.g.\n"
          "gcra:50/s:burst=100 or sliding_window:100/m (see README.md).\n",
          "version");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("sluice %s\n", sl_version_string());
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(cmd, commands[i].name))
      return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "sluice: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 2;
}
