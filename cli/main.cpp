// strata: the command-line face of the library (cli/app.cpp; exit codes 0 ok, 1 internal or
// environment failure, 2 bad input, 130 interrupted).
#include "cli.hpp"

int main(int argc, char** argv) { return strata::cli::run(argc, argv); }
