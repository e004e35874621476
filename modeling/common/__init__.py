"""What every side of the package shares and none owns: one-line command-line errors and line I/O
(`command_line`), replacing a file whole or not at all (`file_writes`), the name of the machine a run used
(`hardware`) and the names of the files and folders a training run writes (`run_folders`). Imports nothing else of
the package."""
