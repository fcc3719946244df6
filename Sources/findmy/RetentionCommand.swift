import CLI
import JSON
import Maintenance

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
        return try RetentionOverride.set(data: data, request: writer.bytes, json: options.flag("json"))
    }
}
