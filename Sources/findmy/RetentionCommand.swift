import CLI
import Compactor
import Events
import HTTP
import HTTPClient
import Identity
import Ingest
import JSON
import Postgres
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy retention set --device ID | --user NAME --days N | --clear`: an admin's override.
enum RetentionCommand {
    static let command = Command(
        name: "retention", summary: "set or clear a device's or a user's retention window"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy retention set (--device ID | --user NAME) (--days N | --clear) --data-dir DIR

        Sets how many days the fixes of one device, or of every device of one user, are kept (a device's
        own window wins over its user's), or clears the override. The change is an event in the log; the
        next compaction applies it (docs/retention.md). Through the server's admin socket when it runs.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["data-dir", "device", "user", "days"], flags: ["clear", "json"])
        if options.flag("help") || options.positional.isEmpty {
            print(help)
            return options.flag("help") ? 0 : 2
        }
        guard options.positional == ["set"] else { throw UsageError("the only subcommand is 'set'") }
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        var writer = JSONWriter(capacity: 96)
        writer.beginObject()
        switch (options.value("device"), options.value("user")) {
        case (let device?, nil):
            guard let id = Int64(device) else { throw UsageError("--device takes a device id (a number)") }
            writer.key("device")
            writer.int64(id)
        case (nil, let user?):
            writer.key("user")
            writer.string(user)
        default:
            throw UsageError("give exactly one of --device ID and --user NAME")
        }
        writer.key("days")
        switch (options.value("days"), options.flag("clear")) {
        case (let days?, false):
            guard let number = Int64(days) else { throw UsageError("--days takes a whole number") }
            writer.int64(number)
        case (nil, true): writer.null()
        default: throw UsageError("give exactly one of --days N and --clear")
        }
        writer.endObject()
        let answer = try AdminCall.send(data: data, "POST", "/admin/retention", body: writer.bytes) { log in
            let service = try IngestService(log: log)
            var router = GuardedRouter(service: service, listener: .adminSocket)
            service.addAdminRoutes(to: &router)
            return (try router.build(), {})
        }
        let document = try AdminCall.check(answer)
        if options.flag("json") {
            printLine(String(decoding: answer.body, as: UTF8.self))
        } else {
            let days =
                (try? document["days"]?.int64Value).map { "\($0) days" } ?? "cleared (back to the default)"
            printLine("retention \(days), offset \((try? document["offset"]?.int64Value) ?? 0)")
        }
        return 0
    }
}
