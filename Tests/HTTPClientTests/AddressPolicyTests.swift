import HTTPClient
import Testing

@Suite struct AddressPolicyTests {
    func address(_ text: String) throws -> IPAddress { try #require(IPAddress(literal: text), "\(text)") }

    @Test(arguments: [
        ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"), ("10.0.0.1", "private"),
        ("172.16.0.1", "private"), ("172.31.255.255", "private"), ("192.168.1.1", "private"),
        ("100.64.0.1", "shared (CGNAT)"), ("100.127.255.255", "shared (CGNAT)"), ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"), ("169.254.169.254", "link-local"), ("224.0.0.1", "multicast"),
        ("255.255.255.255", "reserved"), ("::", "unspecified"), ("::1", "loopback"),
        ("fc00::1", "unique-local"),
        ("fdff::1", "unique-local"), ("fe80::1", "link-local"), ("febf::1", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"), ("::127.0.0.1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "link-local"), ("2002:c0a8:0101::1", "private"), ("64:ff9b:1::1", "private"),
        // Spellings the resolver reads as IPv4.
        ("127.1", "loopback"), ("2130706433", "loopback"), ("0x7f.0.0.1", "loopback"),
        ("0177.0.0.1", "loopback"),
        ("[::1]", "loopback"), ("fe80::1%25eth0", "link-local"),
    ])
    func nonPublicAddressesAreRefused(_ text: String, _ kind: String) throws {
        #expect(AddressPolicy().refusal(try address(text)) == kind, "\(text)")
    }

    @Test(arguments: [
        "8.8.8.8", "93.184.216.34", "172.15.255.255", "172.32.0.0", "100.63.255.255", "100.128.0.0",
        "169.253.0.1",
        "11.0.0.0", "223.255.255.255", "2001:db8::1", "2606:4700::1111", "::ffff:8.8.8.8",
        "2002:0808:0808::1",
        "64:ff9b::808:808",
    ])
    func publicAddressesPass(_ text: String) throws {
        #expect(AddressPolicy().refusal(try address(text)) == nil, "\(text)")
    }

    @Test func theOperatorsBlocksAreAllowedAndNothingElse() throws {
        let policy = try #require(AddressPolicy.parse("127.0.0.0/8, ::1/128,192.168.1.0/24"))
        #expect(policy.refusal(try address("127.0.0.1")) == nil)
        #expect(policy.refusal(try address("::1")) == nil)
        #expect(policy.refusal(try address("::ffff:127.0.0.1")) == nil)
        #expect(policy.refusal(try address("192.168.1.77")) == nil)
        #expect(policy.refusal(try address("192.168.2.1")) == "private")
        #expect(policy.refusal(try address("169.254.169.254")) == "link-local")
        #expect(policy.refusal(try address("10.0.0.1")) == "private")
        #expect(AddressPolicy.parse("")?.allowed == [])
        for bad in ["127.0.0.0/33", "127.1/8", "localhost", "::1/129", "10.0.0.0/8/8", "fd00::/x"] {
            #expect(AddressPolicy.parse(bad) == nil, "\(bad)")
        }
    }

    @Test func aRangeClearsItsHostBits() throws {
        let range = try #require(AddressRange("10.1.2.3/8"))
        #expect(range.description == "10.0.0.0/8")
        #expect(range.contains(try address("10.255.0.1")))
        #expect(!range.contains(try address("11.0.0.1")))
        #expect(!range.contains(try address("::ffff:10.0.0.1")))
        #expect(try #require(AddressRange("fd00::/8")).contains(try address("fdab::1")))
        #expect(try #require(AddressRange("0.0.0.0/0")).contains(try address("8.8.8.8")))
    }

    @Test(arguments: [
        ("http://127.0.0.1:8080/hook", "127.0.0.1"), ("https://user:pw@[::1]:443/x", "[::1]"),
        ("https://hooks.example.org/a?b=c", "hooks.example.org"), ("http://localhost", "localhost"),
        ("https://h.example#frag", "h.example"), ("no-scheme", nil), ("http:///path", nil),
    ])
    func theHostOfAURL(_ url: String, _ host: String?) {
        #expect(AddressPolicy.host(ofURL: url) == host, "\(url)")
    }

    @Test func hostsAreRefusedWhenTheyAreLiteralNonPublicAddressesOrLocalhost() {
        let policy = AddressPolicy()
        #expect(policy.refusal(host: "localhost") == "loopback")
        #expect(policy.refusal(host: "LocalHost.") == "loopback")
        #expect(policy.refusal(host: "api.localhost") == "loopback")
        #expect(policy.refusal(host: "[::1]") == "loopback")
        #expect(policy.refusal(host: "2130706433") == "loopback")
        #expect(policy.refusal(host: "hooks.example.org") == nil)
        #expect(policy.refusal(host: "1e100.net") == nil)
        #expect(policy.refusal(host: "8.8.8.8") == nil)
        let allowed = AddressPolicy(allowed: [AddressRange("127.0.0.0/8")!])
        #expect(allowed.refusal(host: "localhost") == nil)
    }
}
