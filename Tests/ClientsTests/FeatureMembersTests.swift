import Testing

@testable import Clients

/// The direct decoder finds a wanted member of `properties` by its length first: every name must
/// be found by its own bytes, and a name one byte longer or shorter by none.
@Suite struct FeatureMembersTests {
    @Test func everyPropertyIsFoundByItsName() {
        for property in FeatureMembers.Property.allCases {
            let name = Array(property.name.description.utf8)
            name.withUnsafeBufferPointer {
                #expect(FeatureMembers.Property(named: $0) == property, "\(name)")
            }
            (name + [UInt8(ascii: "x")]).withUnsafeBufferPointer {
                #expect(FeatureMembers.Property(named: $0) == nil)
            }
            name.dropLast().withUnsafeBufferPointer { #expect(FeatureMembers.Property(named: $0) == nil) }
        }
    }
}
