// The pod sandbox's process for the e2e cluster (tests/e2e): containerd starts one per pod
// to hold its namespaces. No registry is reachable from the test machines, so the e2e suite
// builds this instead of pulling registry.k8s.io/pause. It sleeps until SIGINT or SIGTERM and
// reaps the children that PID 1 inherits.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void Quit(int sig) {
  (void)sig;
  _exit(0);
}

static void Reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction quit = {.sa_handler = Quit};
  struct sigaction reap = {.sa_handler = Reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  if (sigaction(SIGINT, &quit, NULL) != 0 || sigaction(SIGTERM, &quit, NULL) != 0 ||
      sigaction(SIGCHLD, &reap, NULL) != 0) {
    return 1;
  }
  for (;;) pause();
}
