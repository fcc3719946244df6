import Crypto
import Foundation
import Testing

/// `findmy serve` with push providers configured: key files others can read stop the start with a
/// message that says how to fix it (and never the key), good ones start it, the VAPID key is made
/// once with mode 0600, and `--help` names every option.
@Suite struct PushServeTests {
    func writeKey(_ path: String, mode: mode_t) throws {
        let pem = PrivateKey.generateP256().pemText()
        _ = FileManager.default.createFile(atPath: path, contents: Data(pem))
        chmod(path, mode)
    }

    @Test func keyFilesMustBeTheOwnersAloneAndTheVAPIDKeyIsMadeOnce() throws {
        let data = ScratchDirectory("findmy-push-serve")
        let keys = ScratchDirectory("findmy-push-keys")
        let keyFile = keys.path + "/AuthKey_KEY1234567.p8"
        try writeKey(keyFile, mode: 0o644)
        let apns = [
            "--apns-key-file", keyFile, "--apns-key-id", "KEY1234567", "--apns-team-id", "TEAM123456",
            "--apns-bundle-id", "org.findmy.app",
        ]
        let refused = try FindmyProcess.run(
            ["serve", "--data-dir", data.path, "--listen", "127.0.0.1:0", "--projector", "off"] + apns,
            timeoutSeconds: 120)
        #expect(refused.status != 0)
        #expect(refused.error.contains("chmod 600 \(keyFile)"), "\(refused.error)")
        #expect(!refused.error.contains("PRIVATE KEY") && !refused.output.contains("PRIVATE KEY"))

        let incomplete = try FindmyProcess.run(
            ["serve", "--data-dir", data.path, "--listen", "127.0.0.1:0", "--apns-key-file", keyFile],
            timeoutSeconds: 60)
        #expect(incomplete.status != 0 && incomplete.error.contains("--apns-team-id"))

        chmod(keyFile, 0o600)
        let server = try ServerProcess(
            data: data.path, extraArguments: apns + ["--unifiedpush-contact", "mailto:admin@findmy.example"])
        #expect(server.stop() == 0)
        let vapid = data.path + "/push/vapid-key.pem"
        var status = stat()
        #expect(stat(vapid, &status) == 0 && status.st_mode & 0o777 == 0o600)
        let first = try Data(contentsOf: URL(fileURLWithPath: vapid))
        let again = try ServerProcess(
            data: data.path, extraArguments: ["--unifiedpush-contact", "mailto:a@b.example"])
        #expect(again.stop() == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: vapid)) == first)
        #expect(!server.process.standardError.contains("PRIVATE KEY"))
    }

    @Test func helpNamesEveryPushOption() throws {
        let help = try FindmyProcess.run(["serve", "--help"], timeoutSeconds: 60)
        for flag in [
            "apns-key-file", "apns-key-id", "apns-team-id", "apns-bundle-id", "apns-critical-sound",
            "apns-url",
            "apns-sandbox-url", "fcm-service-account-file", "fcm-project", "fcm-url", "fcm-token-url",
            "unifiedpush-contact", "push-ca-file",
        ] {
            #expect(help.output.contains("--" + flag), "\(flag)")
        }
    }
}
