import Foundation
import HTTPClient
import JSON
import Testing

/// The command stream (docs/commands.md, "Command stream") against a real `findmy serve`: what a
/// device holding `GET /api/find-my/device/commands/stream` is told, and when.
@Suite(.serialized) struct CommandStreamEndToEndTests {
    static let streamPath = "/api/find-my/device/commands/stream"

    static func connect(_ server: ServerProcess, token: String, lastEventID: String? = nil) throws
        -> EventStreamClient
    {
        var headers = [("Authorization", "Bearer \(token)")]
        if let lastEventID { headers.append(("Last-Event-ID", lastEventID)) }
        return try EventStreamClient(address: server.address, target: streamPath, requestHeaders: headers)
    }

    static func json(_ event: ServerSentEvent?) throws -> JSONValue {
        try JSONParser.parse(Array(try #require(event?.data).utf8))
    }

    /// The opening of every stream: `retry`, then `ready` with the open commands' ids.
    static func readOpening(_ stream: EventStreamClient) throws -> [String] {
        #expect(stream.status == 200)
        #expect(stream.headers["content-type"] == "text/event-stream; charset=utf-8")
        #expect(stream.headers["cache-control"] == "no-store")
        #expect(stream.headers["x-accel-buffering"] == "no")
        #expect(stream.headers["transfer-encoding"]?.lowercased() == "chunked")
        let retry = stream.nextSkippingHeartbeats()
        #expect(retry?.retry == "5000", "\(String(describing: retry))")
        let ready = stream.nextSkippingHeartbeats()
        #expect(ready?.event == "ready" && ready?.id == nil, "\(String(describing: ready))")
        return try json(ready)["open"]!.arrayValue.map { try $0.stringValue }
    }

    static func postCommand(
        _ connection: HTTPConnection, device: Int64, token: String, _ body: String
    ) throws -> String {
        let answer = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(device)/commands", token: token, body: body
        ).answer
        #expect(answer.status == 202, "\(answer.body)")
        return try #require(answer.string("command_id"))
    }

    @Test func openCommandsNewOnesSentDeliveriesEndedResumeAndHeartbeat() throws {
        let data = ScratchDirectory("findmy-stream")
        let olga = try addUser("olga", data: data.path)
        let server = try ServerProcess(
            data: data.path,
            extraArguments: ["--projector", "on", "--command-stream-heartbeat-seconds", "1"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let enrolled = try enrol(connection, userToken: olga, uuid: UUID().uuidString)
        let device = try #require(enrolled.int("device_id"))
        let token = try #require(enrolled.string("device_token"))

        // A locate asked for before the device connects: in `ready`, then as a command.
        let locate = try Self.postCommand(connection, device: device, token: olga, "{\"kind\": \"locate\"}")
        let first = try Self.connect(server, token: token)
        #expect(try Self.readOpening(first) == [locate])
        let locateEvent = first.nextSkippingHeartbeats()
        #expect(locateEvent?.event == "command", "\(String(describing: locateEvent))")
        let locateData = try Self.json(locateEvent)
        #expect(locateData["command_id"] == .string(locate) && locateData["kind"] == .string("locate"))
        #expect(locateData["requested_at"] != nil && locateData["message"] == nil)
        let locateID = try #require(locateEvent?.id.flatMap { UInt64($0) })

        // A command asked for while the stream is open arrives on it, with a larger id.
        let sound = try Self.postCommand(connection, device: device, token: olga, "{\"kind\": \"sound\"}")
        let soundEvent = first.nextSkippingHeartbeats()
        #expect(try soundEvent?.event == "command" && Self.json(soundEvent)["command_id"] == .string(sound))
        let soundID = try #require(soundEvent?.id.flatMap { UInt64($0) })
        #expect(soundID > locateID)

        // Written to a stream counts as sent by channel `stream`, as the owner reads it.
        let sent = try waitForCommand(connection, device: device, command: sound, token: olga) { answer in
            (try? answer.body["deliveries"]?.arrayValue.contains { $0["channel"] == .string("stream") })
                == true
        }
        let channels = try sent.body["deliveries"]?.arrayValue.map { try $0["channel"]!.stringValue }
        #expect(channels == ["stream"], "\(sent.body)")

        // Answered by a report with in_reply_to: `ended`, state answered, reason "".
        let reply = try post(
            connection, "/api/find-my/report", token: token,
            body:
                "{\"batch_id\": \"\(UUID().uuidString)\", \"in_reply_to\": \"\(sound)\", \"fixes\": [\(fixJSON(secondsAgo: 1))]}"
        )
        #expect(reply.status == 200, "\(reply.body)")
        let ended = first.nextSkippingHeartbeats()
        #expect(ended?.event == "ended" && ended?.id == nil, "\(String(describing: ended))")
        let endedData = try Self.json(ended)
        #expect(endedData["command_id"] == .string(sound))
        #expect(endedData["state"] == .string("answered") && endedData["reason"] == .string(""))

        // A lost while the stream is open: message and phone in its data.
        let lost = try Self.postCommand(
            connection, device: device, token: olga,
            "{\"kind\": \"lost\", \"message\": \"Please call\", \"phone\": \"+49 30 1234\"}")
        let lostEvent = first.nextSkippingHeartbeats()
        let lostData = try Self.json(lostEvent)
        #expect(lostData["command_id"] == .string(lost) && lostData["message"] == .string("Please call"))
        #expect(lostData["phone"] == .string("+49 30 1234"))

        // Quiet now: a heartbeat comes (every second on this server).
        let quiet = first.next()
        #expect(quiet?.isHeartbeat == true, "\(String(describing: quiet))")

        // A resume with Last-Event-ID = the locate's id: `ready` names every open command, and only
        // the newer one comes as a command event; the older connection is closed.
        let second = try Self.connect(server, token: token, lastEventID: String(locateID))
        #expect(try Self.readOpening(second) == [locate, lost])
        let resumed = second.nextSkippingHeartbeats()
        #expect(try resumed?.event == "command" && Self.json(resumed)["command_id"] == .string(lost))
        let afterResume = second.next()
        #expect(
            afterResume?.isHeartbeat == true,
            "nothing older than Last-Event-ID: \(String(describing: afterResume))")
        #expect(first.readsToEnd(), "the older stream of the device is closed")

        // The query form of Last-Event-ID, for clients that cannot set headers.
        let third = try EventStreamClient(
            address: server.address, target: Self.streamPath + "?last_event_id=\(soundID)",
            requestHeaders: [("Authorization", "Bearer \(token)")])
        #expect(try Self.readOpening(third) == [locate, lost])
        let fromQuery = third.nextSkippingHeartbeats()
        #expect(try fromQuery?.event == "command" && Self.json(fromQuery)["command_id"] == .string(lost))
        #expect(second.readsToEnd())
    }

    @Test func refusalsTheLimitARemovedDeviceAndAClientThatLeft() throws {
        let data = ScratchDirectory("findmy-stream-limits")
        let olga = try addUser("olga", data: data.path)
        let server = try ServerProcess(
            data: data.path,
            extraArguments: ["--command-streams-max", "1", "--command-stream-heartbeat-seconds", "1"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        var devices: [(id: Int64, token: String)] = []
        for name in ["phone", "laptop", "tablet"] {
            let enrolled = try enrol(connection, userToken: olga, uuid: UUID().uuidString, name: name)
            devices.append(
                (try #require(enrolled.int("device_id")), try #require(enrolled.string("device_token"))))
        }

        // A user token is not a device token; a Last-Event-ID that is no number is refused.
        let user = try Self.connect(server, token: olga)
        #expect(user.status == 401, "\(user.errorBody())")
        let badID = try Self.connect(server, token: devices[0].token, lastEventID: "yesterday")
        #expect(badID.status == 400 && badID.errorBody().contains("invalid_last_event_id"))

        // One stream on this server: the second device's is refused with Retry-After; the first
        // device may connect again (its new stream replaces its old).
        let phone = try Self.connect(server, token: devices[0].token)
        #expect(try Self.readOpening(phone) == [])
        let refused = try Self.connect(server, token: devices[1].token)
        #expect(refused.status == 503 && refused.headers["retry-after"] == "30")
        #expect(refused.errorBody().contains("too_many_streams"))
        let phoneAgain = try Self.connect(server, token: devices[0].token)
        #expect(try Self.readOpening(phoneAgain) == [])
        #expect(phone.readsToEnd())

        // The owner removes the phone: its stream ends, and its place is free for the laptop.
        let removed = try send(connection, "DELETE", "/api/find-my/devices/\(devices[0].id)", token: olga)
        #expect(removed.status == 200, "\(removed.body)")
        #expect(phoneAgain.readsToEnd())
        var laptop: EventStreamClient?
        try waitUntil("the removed device's stream gives its place up") {
            let attempt = try Self.connect(server, token: devices[1].token)
            if attempt.status == 200 { laptop = attempt }
            return attempt.status == 200
        }
        #expect(try Self.readOpening(try #require(laptop)) == [])

        // The laptop's client goes away without a word on the stream: found out at the next
        // heartbeat, and its place is free for the tablet.
        laptop?.client.close()
        try waitUntil("the left client's stream gives its place up") {
            try Self.connect(server, token: devices[2].token).status == 200
        }
    }
}
