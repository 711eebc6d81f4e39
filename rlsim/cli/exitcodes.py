"""Exit statuses shared by every subcommand, so scripts can tell bad input from an infeasible configuration."""
OK = 0
BAD_INPUT = 2  # the input file is malformed: fix it
INFEASIBLE = 3  # the input is valid but the configuration cannot run (e.g. out of memory)
CLOSED_PIPE = 141  # the reader of stdout went away (`rlsim … | head`): what a Unix tool killed by SIGPIPE reports
