// Config file loading lands with the config issue.
