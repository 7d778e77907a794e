package io.kubefacts.anchor;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;

/**
 * One schema's Avro bytes, as kubefacts frames them (docs/SCHEMAS.md): single-object encoding
 * ({@code C3 01}, the 8-byte little-endian CRC-64-AVRO fingerprint of the schema's parsing
 * canonical form, the datum) or the Confluent wire format ({@code 00}, a 4-byte registry id,
 * the datum). A Confluent-framed datum is read with this schema: the anchor reads the
 * backlog kubefacts published with the same embedded schemas and looks no id up.
 *
 * <p>Not thread-safe: each stream task has its own instances (decoder and buffer reuse).
 */
final class Avro {
    final Schema schema;
    private final long fingerprint;
    private final GenericDatumReader<GenericRecord> reader;
    private final GenericDatumWriter<GenericRecord> writer;
    private BinaryDecoder decoder;
    private BinaryEncoder encoder;
    private final ByteArrayOutputStream out = new ByteArrayOutputStream(256);

    Avro(Schema schema) {
        this.schema = schema;
        this.fingerprint = SchemaNormalization.parsingFingerprint64(schema);
        this.reader = new GenericDatumReader<>(schema);
        this.writer = new GenericDatumWriter<>(schema);
    }

    /** The schema of an .avsc file (one self-contained record schema per file). */
    static Schema load(Path schemas, String file) {
        try {
            return new Schema.Parser().parse(Files.readString(schemas.resolve(file)));
        } catch (IOException e) {
            throw new UncheckedIOException("reading " + schemas.resolve(file), e);
        }
    }

    /** Decodes a framed value; fails on a framing or fingerprint this schema does not have. */
    GenericRecord decodeFramed(byte[] bytes) {
        int start;
        if (bytes.length >= 10 && (bytes[0] & 0xff) == 0xC3 && bytes[1] == 0x01) {
            long fp = 0;
            for (int i = 9; i >= 2; i--) {
                fp = (fp << 8) | (bytes[i] & 0xffL);
            }
            if (fp != fingerprint) {
                throw new IllegalArgumentException(
                        "fingerprint " + Long.toHexString(fp) + " is not " + schema.getFullName() + "'s");
            }
            start = 10;
        } else if (bytes.length >= 5 && bytes[0] == 0) {
            start = 5;
        } else {
            throw new IllegalArgumentException("not a single-object or Confluent-framed " + schema.getFullName());
        }
        return decode(bytes, start);
    }

    /** Decodes a bare datum (a state store's value). */
    GenericRecord decode(byte[] bytes, int start) {
        decoder = DecoderFactory.get().binaryDecoder(bytes, start, bytes.length - start, decoder);
        try {
            return reader.read(null, decoder);
        } catch (IOException e) {
            throw new UncheckedIOException("decoding " + schema.getFullName(), e);
        }
    }

    /** Single-object encoding of {@code record} (what kubefacts writes without a registry). */
    byte[] encodeFramed(GenericRecord record) {
        out.reset();
        out.write(0xC3);
        out.write(0x01);
        for (int i = 0; i < 8; i++) {
            out.write((int) (fingerprint >>> (8 * i)) & 0xff);
        }
        return write(record);
    }

    /** The bare datum of {@code record}. */
    byte[] encode(GenericRecord record) {
        out.reset();
        return write(record);
    }

    private byte[] write(GenericRecord record) {
        encoder = EncoderFactory.get().directBinaryEncoder(out, encoder);
        try {
            writer.write(record, encoder);
            encoder.flush();
        } catch (IOException e) {
            throw new UncheckedIOException("encoding " + schema.getFullName(), e);
        }
        return out.toByteArray();
    }
}
