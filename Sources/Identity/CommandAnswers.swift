import Core
import Events
import JSON

extension IdentityService {
    /// The `commands` member of a report answer: what the device should do, oldest first.
    package static func writeCommands(_ commands: [CommandBook.Open], to writer: inout JSONWriter) {
        writer.key("commands")
        writer.beginArray()
        for command in commands { writeCommand(command, to: &writer) }
        writer.endArray()
    }

    /// One command as a device is told of it: an element of a report answer's `commands`, and the
    /// `data` of the command stream's `command` event.
    package static func writeCommand(_ command: CommandBook.Open, to writer: inout JSONWriter) {
        let request = command.request
        writer.beginObject()
        writer.key("command_id")
        writer.string(request.commandID.description)
        writer.key("kind")
        writer.string(request.kind.name)
        writer.key("requested_at")
        writer.string(RFC3339.formatMicros(request.requestedAtMicros))
        if request.kind == .lost {
            writer.key("message")
            writer.string(request.message)
            writer.key("phone")
            writer.string(request.phone)
        }
        writer.endObject()
    }
}

extension IdentityService {
    /// Whether `user` may send commands to `deviceID` now (`Registry.mayCommand`), for the panel.
    public func mayCommand(_ deviceID: UInt64, user: UInt64) -> Bool {
        let now = clockMicros()
        return store.registry.read { $0.registry.mayCommand(deviceID, user: user, atMicros: now) }
    }

    /// Which of `deviceIDs` are marked lost (an open `lost`), for the panel's list.
    public func lostDevices(_ deviceIDs: [UInt64]) -> Set<UInt64> {
        store.registry.read { state in
            Set(deviceIDs.filter { state.registry.commands.lost(deviceID: $0) != nil })
        }
    }
}
