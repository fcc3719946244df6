import FindMyClient
import Testing

@Suite struct SetupLinkTests {
    static let link = SetupLink(
        serverURL: "https://find.example:8443/base", deviceID: 7,
        deviceUUID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        deviceToken: "aB-_c9")

    @Test func aLinkReadsBackAsWhatItWasMadeOf() throws {
        #expect(
            Self.link.text
                == "findmy://setup?url=https%3A%2F%2Ffind.example%3A8443%2Fbase&device_id=7"
                + "&device_uuid=1b4e28ba-2fa1-11d2-883f-0016d3cca427&token=aB-_c9")
        #expect(try SetupLink.parse(Self.link.text) == Self.link)
        #expect(try SetupLink.parse("  " + Self.link.text + "\n") == Self.link)
    }

    @Test func theOrderIsFreeAndATrailingSlashAndUpperCaseUUIDAreTakenAsTheyMean() throws {
        let text =
            "findmy://setup?token=aB-_c9&device_uuid=1B4E28BA-2FA1-11D2-883F-0016D3CCA427&device_id=7"
            + "&url=https%3a%2f%2ffind.example%3a8443%2fbase%2f"
        #expect(try SetupLink.parse(text) == Self.link)
    }

    @Test func whatIsWrongIsSaid() {
        let cases: [(String, SetupLink.Failure)] = [
            ("https://find.example/setup?url=x", .notASetupLink),
            (
                "findmy://setup?url=http%3A%2F%2Fa&device_id=7&device_uuid=1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                .missing("token")
            ),
            (
                "findmy://setup?url=ftp%3A%2F%2Fa&device_id=7&device_uuid=1b4e28ba-2fa1-11d2-883f-0016d3cca427&token=t",
                .invalid("url", "must begin with http:// or https://")
            ),
            (
                "findmy://setup?url=http%3A%2F%2Fa&device_id=-7&device_uuid=1b4e28ba-2fa1-11d2-883f-0016d3cca427&token=t",
                .invalid("device_id", "must be a whole number")
            ),
            (
                "findmy://setup?url=http%3A%2F%2Fa&device_id=7&device_uuid=nope&token=t",
                .invalid("device_uuid", "must be a UUID")
            ),
            ("findmy://setup?url=http%3A%2F%2Fa&url=http%3A%2F%2Fb", .repeated("url")),
            ("findmy://setup?url=http%3A%2F%2Fa%2&device_id=7", .invalid("url", "bad % escape")),
        ]
        for (text, failure) in cases {
            #expect(throws: failure, "\(text)") { try SetupLink.parse(text) }
        }
    }
}
