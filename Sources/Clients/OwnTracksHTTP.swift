import Core
import Crypto
import Events
import HTTP
import Identity
import Ingest
import JSON

/// OwnTracks in HTTP mode: `POST /api/find-my/owntracks`, HTTP Basic with the findmy user name
/// and the device token (docs/clients.md).
///
/// The answer is always `200` with a JSON array once the request is durable, whatever its
/// content: a 4xx makes Android retry the message for weeks and iOS drop it, so content that can
/// never be valid is acknowledged, and kept as a rejection in the arrivals audit and in
/// `/metrics`. Only bad credentials get `401` (from the gate, with `WWW-Authenticate: Basic`),
/// and only a failure to store gets `503`: then nothing was kept and the app must send it again.
extension ClientsService {
    /// A deferred route, as the native report: the event-loop thread decodes and queues the
    /// append, and the group commit that makes it durable answers; no thread waits for the
    /// fdatasync. Only an answer that carries the Friends view (it reads PostgreSQL) is made on a
    /// worker thread.
    func addOwnTracksRoutes(to router: inout GuardedRouter) {
        router.addDeferred("POST", "/api/find-my/owntracks") { [self] request, caller, reply in
            receiveOwnTracks(request, deviceID: caller.tokenDeviceID, reply: reply)
        }
    }

    func receiveOwnTracks(_ request: HTTPRequest, deviceID: UInt64, reply: HTTPReply) {
        let (decoded, hashed, key) = Self.decodeOwnTracks(request, deviceID: deviceID)
        for type in decoded.counted { ingest.recordClientMessage(.owntracksHTTP, type: type) }
        var report = ClientReport(
            deviceID: deviceID,
            batchID: ClientReport.derivedBatchID(
                deviceID: deviceID, clientProtocol: .owntracksHTTP, body: hashed),
            clientProtocol: .owntracksHTTP, items: decoded.items, rejections: decoded.rejections,
            places: decoded.places)
        // A location sent because of a reportLocation command (`t: "r"`, source ondemand) answers it.
        if decoded.items.contains(where: { $0.fix.source == "ondemand" }) { report.answers = .oldestLocate }
        let answersCommand = report.answers != nil
        ingest.submit(report) { [self] outcome in
            switch outcome {
            case .stored, .duplicate, .empty, .paused:
                guard wantsFriends(request, deviceID: deviceID) else {
                    return reply(
                        answer(friends: [], deviceID: deviceID, answersCommand: answersCommand, key: key))
                }
                reply.answerBlocking { [self] in
                    answer(
                        friends: friendsMessages(for: deviceID), deviceID: deviceID,
                        answersCommand: answersCommand, key: key)
                }
            case .inProgress:
                var response = APIError(
                    status: 503, code: .batchInProgress,
                    message: "the same message is being stored by another request; send it again in a second"
                ).response
                response.headers.set("Retry-After", "1")
                reply(response)
            case .failed(let error):
                reply(error.response)
            }
        }
    }

    /// The body's messages; the bytes its batch id is derived from; the key of an encrypted body.
    /// A plain location is read without a tree (`OwnTracks.decodeDirect`); any other body is
    /// parsed once, whether it turns out to be encrypted or not.
    static func decodeOwnTracks(_ request: HTTPRequest, deviceID: UInt64)
        -> (decoded: OwnTracks.Decoded, hashed: [UInt8], key: [UInt8]?)
    {
        if let direct = OwnTracks.decodeDirect(request.body) { return (direct, request.body, nil) }
        let document: JSONValue
        switch OwnTracks.document(request.body) {
        case .success(nil):
            return (OwnTracks.Decoded(), request.body, nil)
        case .failure(let rejection):
            var decoded = OwnTracks.Decoded()
            decoded.rejections.append(.init(index: 0, rejection))
            return (decoded, request.body, nil)
        case .success(let parsed?):
            document = parsed
        }
        guard request.body.count < 1 << 24, let encrypted = OwnTracksEncryption.encryptedData(document) else {
            return (
                OwnTracks.decode(document: document, deviceID: deviceID, clientProtocol: .owntracksHTTP),
                request.body, nil
            )
        }
        let key = OwnTracksEncryption.key(password: basicPassword(request))
        guard let key, let plaintext = OwnTracksEncryption.open(encrypted, key: key) else {
            var decoded = OwnTracks.Decoded()
            decoded.rejections.append(
                .init(
                    index: 0,
                    FixRejection(
                        .malformed,
                        "an encrypted message that this device's key does not open; the OwnTracks encryption key must be the device token (docs/clients.md)"
                    )))
            return (decoded, request.body, key)
        }
        // The apps resend a message after a timeout; the same plaintext is the same batch. (An
        // encrypted resend has a fresh nonce, so the id comes from what is inside.)
        return (
            OwnTracks.decode(plaintext, deviceID: deviceID, clientProtocol: .owntracksHTTP), plaintext, key
        )
    }

    /// The answer once the message is stored: the Friends view (`friends`), the pending locate
    /// (none for the location that answers it: its answer is being stored), and the server's
    /// geofences naming this phone, once after each change (FenceWaypoints.swift).
    func answer(friends: [JSONValue], deviceID: UInt64, answersCommand: Bool, key: [UInt8]?) -> HTTPResponse {
        let commands = answersCommand ? [] : commandMessages(for: deviceID)
        let waypoints = FenceWaypoints.shared.take(for: deviceID, identity: ingest.identity).flatMap {
            try? JSONParser.parse($0)
        }
        return Self.answer(friends + commands + (waypoints.map { [$0] } ?? []), key: key)
    }

    /// A pending locate as OwnTracks' own command (docs/commands.md): the app answers it with a
    /// location whose `t` is `r`. OwnTracks has no command for sound or lost.
    func commandMessages(for deviceID: UInt64) -> [JSONValue] {
        let locates = ingest.identity.store.commandsForAnswer(
            deviceID: deviceID, channel: "owntracks-http", kinds: [.locate])
        guard !locates.isEmpty else { return [] }
        return [.object(["_type": .string("cmd"), "action": .string("reportLocation")])]
    }

    /// The owner's setting (panel account page, `PUT /api/find-my/account/settings`), unless the
    /// URL typed into this app says otherwise: `?friends=1` turns it on for that app alone, as
    /// before the setting existed, and `?friends=0` off.
    func wantsFriends(_ request: HTTPRequest, deviceID: UInt64) -> Bool {
        if let value = request.query("friends")?.lowercased() {
            if ["1", "true", "on", "yes"].contains(value) { return true }
            if ["0", "false", "off", "no"].contains(value) { return false }
        }
        guard let owner = ingest.identity.deviceOwner(deviceID) else { return false }
        return ingest.identity.owntracksFriends(userID: owner)
    }

    /// The answer: a JSON array of messages for the app, encrypted when the request was.
    static func answer(_ messages: [JSONValue], key: [UInt8]?) -> HTTPResponse {
        // Nearly every answer: nothing to tell the app.
        if messages.isEmpty && key == nil { return .json(emptyArray) }
        let plaintext = JSONWriter.encode(.array(messages))
        guard let key else { return .json(plaintext) }
        return .json(OwnTracksEncryption.seal(plaintext, key: key))
    }

    static let emptyArray: [UInt8] = Array("[]".utf8)

    /// The password of HTTP Basic credentials (the gate has checked them already).
    static func basicPassword(_ request: HTTPRequest) -> String? {
        guard let header = request.headers["Authorization"], header.count > 6,
            header.prefix(6).lowercased() == "basic ",
            let decoded = Base64.decode(String(header.dropFirst(6)).trimmingSpaces),
            let text = String(validating: decoded, as: UTF8.self), let colon = text.firstIndex(of: ":")
        else { return nil }
        return String(text[text.index(after: colon)...])
    }
}

/// OwnTracks' payload encryption (`_type: encrypted`), as both apps implement it: libsodium's
/// secretbox, `data` = base64(nonce ‖ MAC ‖ ciphertext), key = the UTF-8 bytes of the key the person
/// typed, cut or zero-padded to 32 bytes. In findmy that key is the device token: the server keeps
/// only token hashes, so it derives the key from the password of each request and never stores it.
enum OwnTracksEncryption {
    /// The `data` of an `{"_type": "encrypted", "data": "..."}` body, decoded from base64; nil for
    /// any other body.
    static func encryptedData(_ document: JSONValue) -> [UInt8]? {
        guard document["_type"] == .string("encrypted"), case .string(let data)? = document["data"] else {
            return nil
        }
        return Base64.decode(data) ?? []
    }

    static func key(password: String?) -> [UInt8]? {
        guard let password, !password.isEmpty else { return nil }
        var key = Array(password.utf8.prefix(SecretBox.keyBytes))
        key += [UInt8](repeating: 0, count: SecretBox.keyBytes - key.count)
        return key
    }

    static func open(_ box: [UInt8], key: [UInt8]) -> [UInt8]? { SecretBox.open(box, key: key) }

    /// `{"_type":"encrypted","data":"..."}` holding `plaintext`.
    static func seal(_ plaintext: [UInt8], key: [UInt8]) -> [UInt8] {
        JSONWriter.encode(
            .object([
                "_type": .string("encrypted"),
                "data": .string(Base64.encode(SecretBox.seal(plaintext, key: key))),
            ]))
    }
}
