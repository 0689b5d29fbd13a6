/* no_entry: a shared object that is not a backend plugin (no nmt_backend_entry); refused. */
int not_a_backend(void);
int not_a_backend(void) { return 42; }
