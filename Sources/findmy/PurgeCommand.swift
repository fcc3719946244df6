import CLI
import Events
import Foundation
import Postgres

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy purge --data-dir DIR [--yes]`: removes everything findmy stored for DIR, wherever it
/// is: the data directory (log, cluster, secret, admin socket), a cluster an earlier findmy put
/// in /var/lib/findmy, a socket directory under /tmp, and the OS user findmy made for the cluster.
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
        Stop `findmy serve` on DIR first. Asks for confirmation on a terminal.

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
        let data = URL(fileURLWithPath: given).standardizedFileURL.path
        try BackupCommand.requireNoServer(data)

        let link = data + "/postgres"
        let outside = outsideClusterDirectory(data)
        let user = instanceOSUserName(data)
        var targets: [String] = []
        if FileManager.default.fileExists(atPath: data) { targets.append(data) }
        if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link) {
            targets.append(target)
        }
        if FileManager.default.fileExists(atPath: outside), !targets.contains(outside) {
            targets.append(outside)
        }
        let userExists = getuid() == 0 && getpwnam(user) != nil
        guard !targets.isEmpty || userExists else {
            printLine("nothing stored for \(data)")
            return 0
        }
        let listing = targets.map { "  " + $0 } + (userExists ? ["  OS user \(user)"] : [])
        if !options.flag("yes") {
            guard isatty(0) != 0 else {
                throw UsageError(
                    "purge deletes for good:\n\(listing.joined(separator: "\n"))\nstandard input is not a terminal: "
                        + "add --yes to confirm")
            }
            print("This deletes for good, with every location in it:\n\(listing.joined(separator: "\n"))")
            print("Type 'yes' to go on: ", terminator: "")
            fflush(nil)
            guard readLine()?.trimmingCharacters(in: .whitespaces) == "yes" else {
                printLine("nothing deleted")
                return 1
            }
        }

        // The cluster first: stopped cleanly, its files, secret, /tmp socket and OS user removed.
        if FileManager.default.fileExists(atPath: link)
            || (try? FileManager.default.destinationOfSymbolicLink(atPath: link)) != nil
        {
            do {
                let cluster = try EmbeddedPostgres(
                    EmbeddedPostgres.Configuration(dataDirectory: data).with { $0.log = { _ in } })
                try cluster.destroy()
            } catch {
                // A cluster findmy cannot manage (a refused data directory, missing binaries):
                // its files still go below, with the rest.
                writeStandardError("findmy purge: \(error); deleting its files anyway")
            }
        }
        for path in targets where FileManager.default.fileExists(atPath: path) {
            do {
                try FileManager.default.removeItem(atPath: path)
            } catch {
                throw UsageError("cannot delete \(path): \(error.localizedDescription)")
            }
        }
        if getuid() == 0, getpwnam(user) != nil { try removeOSUser(user) }
        for line in listing { printLine("deleted" + line.dropFirst(1)) }
        return 0
    }
}

extension EmbeddedPostgres.Configuration {
    fileprivate func with(_ change: (inout Self) -> Void) -> Self {
        var copy = self
        change(&copy)
        return copy
    }
}
