import CLI
import Maintenance

/// `findmy purge --data-dir DIR [--yes]`: the arguments; the plan, its refusals and the deletion
/// are Maintenance's `Purge`.
enum PurgeCommand {
    static let command = Command(
        name: "purge", summary: "stop and delete everything findmy stored for a data directory"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy purge --data-dir DIR [--yes]

        Deletes for good everything findmy stored for DIR (docs/retention.md, "Where every copy lives"):
        the event log, the embedded PostgreSQL cluster (stopped first), its secret, a cluster an earlier
        findmy put in /var/lib/findmy/postgres-<hash>, a socket directory under /tmp, and the OS user
        findmy-<hash> made for the cluster. Backups made with `findmy backup` are not touched.
        Stop `findmy serve` on DIR first. Lists what it deletes, then asks on a terminal.

        DIR must be a findmy data directory: one holding the log's lock file (log/LOCK) beside segment
        files that carry findmy's header and log id. Anything else is refused, and so are /, a home
        directory and a mount point. A symbolic link is resolved once: what it points to is deleted,
        then the link.

        options:
          --yes            do not ask (for scripts); required when standard input is not a terminal
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["data-dir"], flags: ["yes"])
        if options.flag("help") {
            print(help)
            return 0
        }
        guard options.positional.isEmpty else {
            throw UsageError("unexpected argument '\(options.positional[0])'")
        }
        let given = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        return try Purge.run(given, confirmed: options.flag("yes"))
    }
}
