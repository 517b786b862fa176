"""SCRAM-SHA-256/512 exchanges (RFC 5802, RFC 7677) as Kafka's ScramSaslServer runs them."""

from __future__ import annotations

import base64

import pytest

from odradek.security.scram import (
    INVALID_CREDENTIALS,
    ScramClient,
    ScramError,
    ScramServer,
    credential_from_salted,
    credential_from_string,
    credential_to_string,
    escape_name,
    new_credential,
    salted_password,
    unescape_name,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def _store(creds):
    return lambda user, mech: creds.get((user, mech))


def test_rfc_7677_exchange_byte_for_byte():
    cred = new_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    server = ScramServer("SCRAM-SHA-256", _store({("user", "SCRAM-SHA-256"): cred}), nonce=lambda: RFC_SERVER_NONCE)
    first = server.step(b"n,,n=user,r=" + RFC_CLIENT_NONCE.encode())
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def test_our_client_produces_the_rfc_messages():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: RFC_CLIENT_NONCE)
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final_message(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
                                 b"i=4096")
    assert final.endswith(b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ScramError):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_and_wrong_password(mechanism):
    store = _store({("alice", mechanism): new_credential(mechanism, "alice-secret", 8192)})
    server = ScramServer(mechanism, store)
    client = ScramClient(mechanism, "alice", "alice-secret")
    client.verify(server.step(client.final_message(server.step(client.first_message()))))
    assert server.username == "alice"

    server = ScramServer(mechanism, store)
    client = ScramClient(mechanism, "alice", "wrong")
    server_first = server.step(client.first_message())
    with pytest.raises(ScramError, match=INVALID_CREDENTIALS):
        server.step(client.final_message(server_first))
    assert not server.complete and server.username is None


def test_kafka_python_client_authenticates_against_our_server():
    from kafka.net.sasl.scram import ScramClient as KafkaPythonScram

    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        server = ScramServer(mechanism, _store({("bob", mechanism): new_credential(mechanism, "bob-pw")}))
        client = KafkaPythonScram("bob", "bob-pw", mechanism)
        client.process_server_first_message(server.step(client.first_message()))
        client.process_server_final_message(server.step(client.final_message()))  # raises on a wrong signature
        assert server.username == "bob"


def test_unknown_user_fails_at_the_first_message_as_kafka_does():
    server = ScramServer("SCRAM-SHA-256", _store({}))
    with pytest.raises(ScramError, match=INVALID_CREDENTIALS):
        server.step(ScramClient("SCRAM-SHA-256", "nobody", "x").first_message())


def test_a_credential_of_the_other_mechanism_is_not_used():
    store = _store({("alice", "SCRAM-SHA-512"): new_credential("SCRAM-SHA-512", "pw")})
    with pytest.raises(ScramError, match=INVALID_CREDENTIALS):
        ScramServer("SCRAM-SHA-256", store).step(b"n,,n=alice,r=abc")


@pytest.mark.parametrize("message", [
    b"", b"n,,", b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n,,r=abc", b"n,,n=alice",
    b"n,x,n=alice,r=abc", b"\xff\xfe", b"n,,n=al=ZZice,r=abc", b"n,,m=ext,n=alice,r=abc",
])
def test_malformed_client_first_messages_are_refused(message):
    store = _store({("alice", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "pw")})
    with pytest.raises(ScramError):
        ScramServer("SCRAM-SHA-256", store).step(message)


def test_authzid_must_be_the_user():
    store = _store({("alice", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "pw")})
    with pytest.raises(ScramError, match="authorization id"):
        ScramServer("SCRAM-SHA-256", store).step(b"n,a=admin,n=alice,r=abc")
    assert ScramServer("SCRAM-SHA-256", store).step(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")


@pytest.mark.parametrize("tamper", ["nonce", "binding", "proof", "no-proof"])
def test_a_tampered_final_message_is_refused(tamper):
    store = _store({("alice", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "pw")})
    server = ScramServer("SCRAM-SHA-256", store)
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    final = client.final_message(server.step(client.first_message())).decode()
    if tamper == "nonce":
        final = final.replace(",r=", ",r=X")
    elif tamper == "binding":
        # Not compared (as in Kafka), but it is part of the signed AuthMessage: the proof fails.
        final = final.replace("c=biws", "c=" + base64.b64encode(b"y,,").decode())
    elif tamper == "proof":
        final = final[:-6] + "AAAAA="
    else:
        final = final.rsplit(",p=", 1)[0]
    with pytest.raises(ScramError):
        server.step(final.encode())
    assert not server.complete


def test_delegation_tokens_are_refused():
    store = _store({("alice", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "pw")})
    with pytest.raises(ScramError, match="delegation"):
        ScramServer("SCRAM-SHA-256", store).step(b"n,,n=alice,r=abc,tokenauth=true")


def test_names_with_commas_and_equals_are_escaped():
    assert escape_name("a,b=c") == "a=2Cb=3Dc"
    assert unescape_name("a=2Cb=3Dc") == "a,b=c"
    store = _store({("a,b=c", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "pw")})
    server = ScramServer("SCRAM-SHA-256", store)
    client = ScramClient("SCRAM-SHA-256", "a,b=c", "pw")
    client.verify(server.step(client.final_message(server.step(client.first_message()))))
    assert server.username == "a,b=c"


def test_stored_credential_from_what_alter_user_scram_credentials_carries():
    salt = b"0123456789abcdef"
    salted = salted_password("SCRAM-SHA-512", "pw", salt, 4096)
    assert credential_from_salted("SCRAM-SHA-512", salt, salted, 4096) == \
        new_credential("SCRAM-SHA-512", "pw", 4096, salt)


def test_credentials_are_stored_in_kafkas_string_form_without_the_password():
    cred = new_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    text = credential_to_string(cred)
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=") and text.endswith(",iterations=4096")
    assert "pencil" not in text
    assert credential_from_string(text) == cred


def test_librdkafka_2_0_nonce_quirk_is_accepted_as_kafka_accepts_it():
    # librdkafka < 2.2 (kcat 1.7.1 here) sends "r=" + its own nonce + the combined nonce,
    # and signs exactly that; Kafka accepts it (the nonce ends with the combined one).
    import hashlib
    import hmac as _hmac

    store = _store({("alice", "SCRAM-SHA-256"): new_credential("SCRAM-SHA-256", "pw", 4096, RFC_SALT)})
    server = ScramServer("SCRAM-SHA-256", store, nonce=lambda: "snonce")
    server_first = server.step(b"n,,n=alice,r=cnonce")
    without_proof = b"c=biws,r=cnonce" + b"cnoncesnonce"
    auth_message = b"n=alice,r=cnonce," + server_first + b"," + without_proof
    salted = salted_password("SCRAM-SHA-256", "pw", RFC_SALT, 4096)
    client_key = _hmac.new(salted, b"Client Key", "sha256").digest()
    signature = _hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature)))
    assert server.step(without_proof + b",p=" + proof).startswith(b"v=")
    assert server.username == "alice"
    # A nonce that does not end with the combined one is refused.
    other = ScramServer("SCRAM-SHA-256", store, nonce=lambda: "snonce")
    other.step(b"n,,n=alice,r=cnonce")
    with pytest.raises(ScramError, match="nonce"):
        other.step(b"c=biws,r=cnoncesnonceX,p=" + proof)
