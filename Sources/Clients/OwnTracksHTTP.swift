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
    /// A blocking route (a worker thread waits for the group commit): the Friends answer reads
    /// PostgreSQL after the append, which a deferred route's completion must not do.
    func addOwnTracksRoutes(to router: inout GuardedRouter) {
        router.add("POST", "/api/find-my/owntracks") { [self] request, caller in
            receiveOwnTracks(request, deviceID: caller.tokenDeviceID)
        }
    }

    func receiveOwnTracks(_ request: HTTPRequest, deviceID: UInt64) -> HTTPResponse {
        var plaintext = request.body
        var key: [UInt8]?
        var rejection: FixRejection?
        if let encrypted = OwnTracksEncryption.encryptedData(request.body) {
            key = OwnTracksEncryption.key(password: Self.basicPassword(request))
            if let key, let opened = OwnTracksEncryption.open(encrypted, key: key) {
                plaintext = opened
            } else {
                plaintext = []
                rejection = FixRejection(
                    .malformed,
                    "an encrypted message that this device's key does not open; the OwnTracks encryption key must be the device token (docs/clients.md)"
                )
            }
        }
        var decoded = OwnTracks.decode(plaintext, deviceID: deviceID, clientProtocol: .owntracksHTTP)
        if let rejection { decoded.rejections.append(.init(index: 0, rejection)) }
        for type in decoded.counted { ingest.recordClientMessage(.owntracksHTTP, type: type) }
        // The apps resend a message after a timeout; the same plaintext is the same batch. (An
        // encrypted resend has a fresh nonce, so the id comes from what is inside.)
        var report = ClientReport(
            deviceID: deviceID,
            batchID: ClientReport.derivedBatchID(
                deviceID: deviceID, clientProtocol: .owntracksHTTP,
                body: rejection == nil ? plaintext : request.body),
            clientProtocol: .owntracksHTTP, items: decoded.items, rejections: decoded.rejections,
            places: decoded.places)
        // A location sent because of a reportLocation command (`t: "r"`, source ondemand) answers it.
        if decoded.items.contains(where: { $0.fix.source == "ondemand" }) { report.answers = .oldestLocate }
        switch ingest.submitAndWait(report) {
        case .stored, .duplicate, .empty, .paused:
            let friends = wantsFriends(request, deviceID: deviceID) ? friendsMessages(for: deviceID) : []
            // The answering location's own reply asks for nothing: its answer is being stored.
            let commands = report.answers == nil ? commandMessages(for: deviceID) : []
            // The server's geofences naming this phone, once after each change (FenceWaypoints.swift).
            let waypoints = FenceWaypoints.shared.take(for: deviceID, identity: ingest.identity).flatMap {
                try? JSONParser.parse($0)
            }
            return Self.answer(friends + commands + (waypoints.map { [$0] } ?? []), key: key)
        case .inProgress:
            var response = APIError(
                status: 503, code: .batchInProgress,
                message: "the same message is being stored by another request; send it again in a second"
            ).response
            response.headers.set("Retry-After", "1")
            return response
        case .failed(let error):
            return error.response
        }
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
        let plaintext = JSONWriter.encode(.array(messages))
        guard let key else { return .json(plaintext) }
        return .json(OwnTracksEncryption.seal(plaintext, key: key))
    }

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
    static func encryptedData(_ body: [UInt8]) -> [UInt8]? {
        guard body.count < 1 << 24, let document = try? JSONParser.parse(body),
            document["_type"] == .string("encrypted"), case .string(let data)? = document["data"]
        else { return nil }
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
