"""Who may do what: authorized-operation answers today; authentication and ACLs later."""
