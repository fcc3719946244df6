// The client's own files and the server's answers as JSON, through the package's JSON module (no
// Foundation). The files keep the member names they had when Foundation's coders wrote them
// (`client-state.json`, the agent's `credentials.json`), so a state directory written by an
// earlier build reads the same.
import JSON

extension JSONObject {
    /// An optional member, absent and null alike nil.
    fileprivate func optionalString(_ key: String) throws(JSONAccessError) -> String? {
        try stringIfPresent(key)
    }
}

private func parseObject(_ bytes: [UInt8]) throws -> JSONObject {
    try JSONParser.parse(bytes).objectValue
}

private func optional(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }

extension DeviceCredentials {
    /// The credentials as a JSON object (what the agent's credential file holds; an app may keep
    /// the same bytes in its keychain).
    public var jsonBytes: [UInt8] {
        var object: JSONObject = [
            "deviceUUID": .string(deviceUUID), "model": .string(model), "name": .string(name),
            "platform": .string(platform), "serverURL": .string(serverURL),
        ]
        if let deviceID {
            object.members.insert(.init(key: "deviceID", value: .integer(Int64(deviceID))), at: 0)
        }
        if let deviceToken {
            object.members.insert(.init(key: "deviceToken", value: .string(deviceToken)), at: 1)
        }
        return JSONWriter.encode(.object(object))
    }

    /// Credentials from `jsonBytes`' form.
    public init(jsonBytes: [UInt8]) throws {
        let object = try parseObject(jsonBytes)
        let id = try object.int64IfPresent("deviceID")
        guard id.map({ $0 >= 0 }) ?? true else {
            throw JSONAccessError(code: .wrongType, path: [.key("deviceID")], message: "a negative device id")
        }
        self.init(
            serverURL: try object.string("serverURL"), deviceUUID: try object.string("deviceUUID"),
            deviceID: id.map(UInt64.init), deviceToken: try object.optionalString("deviceToken"),
            name: try object.string("name"), platform: try object.string("platform"),
            model: try object.string("model"))
    }
}

extension ClientCommand {
    init(_ object: JSONObject) throws(JSONAccessError) {
        self.init(
            commandID: try object.string("command_id"), kind: try object.string("kind"),
            requestedAt: try object.optionalString("requested_at"),
            message: try object.optionalString("message"),
            phone: try object.optionalString("phone"))
    }

    var json: JSONValue {
        .object([
            "command_id": .string(commandID), "kind": .string(kind), "message": optional(message),
            "phone": optional(phone), "requested_at": optional(requestedAt),
        ])
    }

    static func parse(_ bytes: [UInt8]) throws -> ClientCommand { try ClientCommand(parseObject(bytes)) }
}

extension ClientState {
    var jsonBytes: [UInt8] {
        let tokens: [JSONValue] = pushTokens.map { token in
            .object([
                "auth": optional(token.auth), "environment": optional(token.environment),
                "p256dh": optional(token.p256dh), "provider": .string(token.provider),
                "token": .string(token.token),
                "topic": optional(token.topic),
            ])
        }
        let ledger: JSONValue = .object([
            "actedOn": .array(commands.actedOn.map { .string($0) }),
            "lastEventID": optional(commands.lastEventID),
            "lost": commands.lost?.json ?? .null, "sounding": optional(commands.sounding),
        ])
        return JSONWriter.encode(
            .object(["commands": ledger, "paused": .bool(paused), "pushTokens": .array(tokens)]))
    }

    init(jsonBytes: [UInt8]) throws {
        let object = try parseObject(jsonBytes)
        self.init()
        paused = try object.bool("paused")
        pushTokens = try object.decode("pushTokens") { value throws(JSONAccessError) in
            try value.mapArray { token throws(JSONAccessError) in
                let token = try token.objectValue
                return PushToken(
                    provider: try token.string("provider"), token: try token.string("token"),
                    topic: try token.optionalString("topic"),
                    environment: try token.optionalString("environment"),
                    p256dh: try token.optionalString("p256dh"), auth: try token.optionalString("auth"))
            }
        }
        let ledger = try object.decode("commands") { value throws(JSONAccessError) in try value.objectValue }
        commands = CommandLedger(
            actedOn: try ledger.decode("actedOn") { value throws(JSONAccessError) in
                try value.mapArray { id throws(JSONAccessError) in try id.stringValue }
            },
            lastEventID: try ledger.optionalString("lastEventID"),
            sounding: try ledger.optionalString("sounding"),
            lost: try ledger.decodeIfPresent("lost") { value throws(JSONAccessError) in
                try ClientCommand(value.objectValue)
            })
    }
}

/// The answer of `POST /api/find-my/report`.
struct ReportAnswer {
    var accepted: Int
    var rejected: [(index: Int, reason: String)]
    var duplicate: Bool
    var commands: [ClientCommand]

    init(_ bytes: [UInt8]) throws {
        let object = try parseObject(bytes)
        accepted = Int(try object.int64("accepted"))
        rejected = try object.decode("rejected") { value throws(JSONAccessError) in
            try value.mapArray { rejection throws(JSONAccessError) in
                let rejection = try rejection.objectValue
                return (Int(try rejection.int64("index")), try rejection.string("reason"))
            }
        }
        duplicate = try object.bool("duplicate")
        commands =
            try object.decodeIfPresent("commands") { value throws(JSONAccessError) in
                try value.mapArray { command throws(JSONAccessError) in try ClientCommand(command.objectValue)
                }
            } ?? []
    }
}

/// The answer of `POST /api/find-my/devices`.
struct EnrolmentAnswer {
    var deviceID: UInt64
    var deviceToken: String

    init(_ bytes: [UInt8]) throws {
        let object = try parseObject(bytes)
        let id = try object.int64("device_id")
        guard id >= 0 else {
            throw JSONAccessError(
                code: .wrongType, path: [.key("device_id")], message: "a negative device id")
        }
        deviceID = UInt64(id)
        deviceToken = try object.string("device_token")
    }
}

/// An error answer's `{"error": {"code", "message"}}`.
enum ErrorAnswer {
    static func parse(_ body: [UInt8]) -> (code: String, message: String)? {
        guard let object = try? parseObject(body),
            let error = try? object.decode("error", { v throws(JSONAccessError) in try v.objectValue }),
            let code = try? error.string("code"), let message = try? error.string("message")
        else { return nil }
        return (code, message)
    }
}

/// The stream's `ready` event: every open command of the device.
enum ReadyEvent {
    static func open(_ bytes: [UInt8]) throws -> [String] {
        try parseObject(bytes).decode("open") { value throws(JSONAccessError) in
            try value.mapArray { id throws(JSONAccessError) in try id.stringValue }
        }
    }
}

/// The stream's `ended` event.
struct EndedEvent {
    var commandID: String
    var state: String

    init(_ bytes: [UInt8]) throws {
        let object = try parseObject(bytes)
        commandID = try object.string("command_id")
        state = try object.string("state")
    }
}
