// commands.h - the dilattn tool's subcommands; each returns the exit code or throws CliError.
// argv[first..argc) are the subcommand's own arguments. See dilattn_cli.cpp for the usage text.
#ifndef DILATTN_TOOLS_COMMANDS_H
#define DILATTN_TOOLS_COMMANDS_H

namespace dilattn_cli {

int cmd_forward(int argc, char** argv, int first);   // cmd_attention.cpp
int cmd_backward(int argc, char** argv, int first);  // cmd_attention.cpp
int cmd_compare(int argc, char** argv, int first);   // cmd_compare.cpp
int cmd_mask(int argc, char** argv, int first);      // cmd_mask.cpp
int cmd_info(int argc, char** argv, int first);      // cmd_info.cpp

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_COMMANDS_H
