"""What a command needs from its process, apart from its job: the start-up and exit of a
command (`startup`: the garbage collector, SIGTERM, standard output at exit), stop signals and
their echo (`signals`), a reader that notices a closed output pipe (`pipes`), and the lock on
a run directory (`lock`)."""
