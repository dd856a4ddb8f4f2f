// SPDX-License-Identifier: Apache-2.0
#include "cli.hpp"

#include <iostream>

int main(int argc, char** argv) { return bwplan::cli::run(argc, argv, std::cout, std::cerr); }
