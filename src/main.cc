// gpulet: one small daemon per Kubernetes GPU node. Everything lives in the command table
// (src/cli/); main only hands over the arguments.
#include "cli/command.h"

int main(int argc, char** argv) { return gpulet::cli::RunCli(argc, argv); }
