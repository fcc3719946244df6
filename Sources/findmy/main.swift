import Events

// Placeholder entry point until the command-line interface lands.
print("findmy: nothing here yet (event log format \(EventLogFormat.version))")
