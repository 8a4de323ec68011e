/*
 * replay_main.c — runs one libFuzzer harness (fuzz/NAME_fuzz.c) without
 * libFuzzer, once over each given input, so that `make check` builds every
 * harness with the ordinary compiler and flags (and so under ASan/UBSan and
 * TSan in CI) and replays the committed seeds of fuzz/corpus/NAME.
 *
 * Why: the libFuzzer binaries need clang and -fsanitize=fuzzer and are built
 * only by `make fuzz`, which CI does not run, so without this a harness could
 * stop compiling, or a seed start crashing, unnoticed. This is the usual
 * "standalone fuzz target main" (oss-fuzz's StandaloneFuzzTargetMain.c does
 * the same), written for our build:
 *   - each argument is a file, or a directory whose regular files are read
 *     in sorted (byte) order, not recursing;
 *   - each input is copied into a buffer of exactly its size (as libFuzzer
 *     does, so that a read past its end is caught by ASan) and given to
 *     LLVMFuzzerTestOneInput once, after LLVMFuzzerInitialize if the
 *     harness defines one;
 *   - when an input crashes, stderr names its file: from a signal handler
 *     (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) in a plain build, and from
 *     the sanitizers' death callback in an instrumented one;
 *   - at the end it prints "NAME: N inputs" and exits 0; it exits 1 when an
 *     argument cannot be read or when no input was run (an empty corpus
 *     would otherwise pass silently).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a harness; weak, so that a harness without it still links. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
/* Defined by the sanitizer runtimes only; weak, so that a plain build links
 * and sees it as NULL. */
void __sanitizer_set_death_callback(void (*callback)(void))
    __attribute__((weak));

/* The file being run (empty between inputs), read by the crash reporters. */
static char current[4096];
static size_t current_len;

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define NSIG_CRASH (sizeof crash_signals / sizeof crash_signals[0])
/* What each of crash_signals did before ours (a sanitizer's handler, or
 * the default), restored before the signal is delivered again. */
static struct sigaction previous[NSIG_CRASH];

/* Writes "replay: crash on input PATH" to stderr when an input is being
 * run; only write(2), so that it is safe in a signal handler. Said once:
 * a signal handler that hands over to a sanitizer's would otherwise say
 * it again from the death callback. */
static void say_input(void) {
  static volatile sig_atomic_t said;
  if (current_len == 0 || said) return;
  said = 1;
  static const char pre[] = "replay: crash on input ";
  ssize_t r = write(STDERR_FILENO, pre, sizeof pre - 1);
  r = write(STDERR_FILENO, current, current_len);
  r = write(STDERR_FILENO, "\n", 1);
  (void)r;
}

/* The crash handler: names the input, puts back what handled the signal
 * before, and lets it happen again. A fault (si_code > 0: the kernel's)
 * happens again by itself when the faulting instruction is retried, with
 * its real context for a sanitizer's report; a sent signal (abort's) is
 * raised again. */
static void on_crash(int sig, siginfo_t *info, void *uctx) {
  (void)uctx;
  say_input();
  for (size_t i = 0; i < NSIG_CRASH; i++)
    if (crash_signals[i] == sig) sigaction(sig, &previous[i], NULL);
  if (info->si_code <= 0) raise(sig);
}

/* Registers say_input as the sanitizers' death callback. GCC links UBSan
 * as its own library beside ASan's (libubsan.so.1, with its own copy of the
 * sanitizer runtime's state), so the weak symbol reaches ASan's (or TSan's)
 * copy only, and UBSan's is found by name when it is loaded. */
static void set_death_callbacks(void) {
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(say_input);
  void *ubsan = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!ubsan) return;
  void (*set)(void (*)(void));
  *(void **)&set = dlsym(ubsan, "__sanitizer_set_death_callback");
  if (set) set(say_input);
  dlclose(ubsan);
}

static void install_reporters(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_crash;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < NSIG_CRASH; i++)
    sigaction(crash_signals[i], &sa, &previous[i]);
  set_death_callbacks();
}

/* Reads the whole file at path into a malloc'd buffer of exactly its size;
 * 0 and *data, *size set, or -1 with errno set. */
static int read_all(const char *path, uint8_t **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  struct stat st;
  if (fstat(fileno(f), &st) != 0) goto fail;
  size_t n = (size_t)st.st_size;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) goto fail;
  if (n && fread(buf, 1, n, f) != n) {
    free(buf);
    if (!ferror(f)) errno = EIO; /* shorter than fstat said */
    goto fail;
  }
  fclose(f);
  *data = buf;
  *size = n;
  return 0;
fail:;
  int e = errno;
  fclose(f);
  errno = e;
  return -1;
}

/* Runs the harness once on the file at path and counts it in *runs; 0, or
 * -1 after saying on stderr what could not be read. */
static int run_file(const char *path, long *runs) {
  uint8_t *data;
  size_t size;
  if (read_all(path, &data, &size) != 0) {
    fprintf(stderr, "replay: cannot read input %s: %s\n", path,
            strerror(errno));
    return -1;
  }
  size_t len = strlen(path);
  if (len >= sizeof current) len = sizeof current - 1;
  memcpy(current, path, len);
  current_len = len;
  LLVMFuzzerTestOneInput(data, size);
  current_len = 0;
  free(data);
  (*runs)++;
  return 0;
}

/* Runs every regular file directly in dir, in sorted order (alphasort is
 * strcmp's order: the locale is never set); 0, or -1 after saying on
 * stderr what failed. */
static int run_dir(const char *dir, long *runs) {
  struct dirent **names;
  int n = scandir(dir, &names, NULL, alphasort);
  if (n < 0) {
    fprintf(stderr, "replay: cannot list directory %s: %s\n", dir,
            strerror(errno));
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    char path[sizeof current];
    struct stat st;
    int w = snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    if (w < 0 || (size_t)w >= sizeof path) {
      fprintf(stderr, "replay: path too long in %s: %s\n", dir,
              names[i]->d_name);
      rc = -1;
    } else if (stat(path, &st) != 0) {
      fprintf(stderr, "replay: cannot stat %s: %s\n", path, strerror(errno));
      rc = -1;
    } else if (S_ISREG(st.st_mode)) {
      rc = run_file(path, runs);
    }
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  const char *slash = strrchr(argv[0], '/');
  const char *name = slash ? slash + 1 : argv[0];
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
    return 2;
  }
  install_reporters();
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long runs = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: cannot read %s: %s\n", argv[i],
              strerror(errno));
      return 1;
    }
    int rc = S_ISDIR(st.st_mode) ? run_dir(argv[i], &runs)
                                 : run_file(argv[i], &runs);
    if (rc != 0) return 1;
  }
  printf("%s: %ld inputs\n", name, runs);
  if (runs == 0) {
    fprintf(stderr, "replay: %s: no input in %s\n", name,
            argc == 2 ? argv[1] : "the arguments");
    return 1;
  }
  return 0;
}
