import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.Collection;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.MetadataRecordType;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.types.ArrayOf;
import org.apache.kafka.common.protocol.types.CompactArrayOf;
import org.apache.kafka.common.protocol.types.Field;
import org.apache.kafka.common.protocol.types.Schema;
import org.apache.kafka.common.protocol.types.TaggedFields;
import org.apache.kafka.common.protocol.types.Type;
import org.apache.kafka.common.protocol.types.BoundField;

/**
 * Test helper (kstore's own code, run with `java -cp ORACLE_CP MetadataSchemas.java [CLASS...]`): prints,
 * for every MetadataRecordType the oracle's Kafka build knows (no arguments) or for the named generated
 * message classes, what the generated class says, as one JSON line per message: id and enum name (record
 * types), class, version range, the wire Schema of every version (SCHEMAS[v]:
 * field order, types, nullability, compact encodings, tagged fields by tag), and the default value of
 * every field of the message and of its nested structs (read through the generated accessors of a freshly
 * constructed object). tests/parsers/test_metadata_records_oracle.py compares this with
 * kstore_cli/parsers/metadata_records.py, tests/parsers/test_schemas_oracle.py with parsers/schemas.py.
 */
public class MetadataSchemas {
    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String type(Type t) {
        if (t instanceof Schema) {
            StringBuilder b = new StringBuilder("{\"struct\":[");
            BoundField[] fs = ((Schema) t).fields();
            for (int i = 0; i < fs.length; i++) {
                if (i > 0) b.append(',');
                b.append('[').append(q(fs[i].def.name)).append(',').append(type(fs[i].def.type)).append(']');
            }
            return b.append("]}").toString();
        }
        if (t instanceof TaggedFields) {
            StringBuilder b = new StringBuilder("{\"tagged\":[");
            boolean first = true;
            for (Map.Entry<Integer, Field> e : new TreeMap<>(((TaggedFields) t).fields()).entrySet()) {
                if (!first) b.append(',');
                first = false;
                b.append('[').append(e.getKey()).append(',').append(q(e.getValue().name)).append(',')
                    .append(type(e.getValue().type)).append(']');
            }
            return b.append("]}").toString();
        }
        if (t instanceof ArrayOf || t instanceof CompactArrayOf) {
            return "{\"array\":" + type(t.arrayElementType().get()) + ",\"compact\":" + (t instanceof CompactArrayOf)
                + ",\"nullable\":" + t.isNullable() + "}";
        }
        return q(t.toString());
    }

    static String value(Object v) {
        if (v == null) return "null";
        if (v instanceof Boolean || v instanceof Number) return v.toString();
        if (v instanceof byte[]) return "{\"bytes\":" + ((byte[]) v).length + "}";
        if (v instanceof Collection) {
            StringBuilder b = new StringBuilder("[");
            boolean first = true;
            for (Object e : (Collection<?>) v) {
                if (!first) b.append(',');
                first = false;
                b.append(value(e));
            }
            return b.append(']').toString();
        }
        if (v instanceof String || v instanceof Uuid) return q(v.toString());
        return q("<" + v.getClass().getSimpleName() + ">");  // a nested struct (its defaults are listed separately)
    }

    static void defaults(Class<?> c, StringBuilder b) throws Exception {
        if (!Message.class.isAssignableFrom(c) || Modifier.isAbstract(c.getModifiers())) return;
        Object o = c.getConstructor().newInstance();
        if (b.length() > 1) b.append(',');
        b.append(q(c.getSimpleName())).append(":{");
        boolean first = true;
        for (Method m : c.getDeclaredMethods()) {
            if (m.getParameterCount() != 0 || !Modifier.isPublic(m.getModifiers()) || Modifier.isStatic(m.getModifiers())) continue;
            String n = m.getName();
            if (n.equals("duplicate") || n.equals("toString") || n.equals("hashCode") || n.equals("unknownTaggedFields")
                || n.equals("apiKey") || n.equals("lowestSupportedVersion") || n.equals("highestSupportedVersion")) continue;
            if (!first) b.append(',');
            first = false;
            b.append(q(n)).append(':').append(value(m.invoke(o)));
        }
        b.append('}');
        for (Class<?> inner : c.getDeclaredClasses()) defaults(inner, b);
    }

    static String describe(Message msg, String head) throws Exception {
        Schema[] schemas = (Schema[]) msg.getClass().getField("SCHEMAS").get(null);
        StringBuilder b = new StringBuilder("{").append(head)
            .append("\"class\":").append(q(msg.getClass().getSimpleName()))
            .append(",\"lowest\":").append(msg.lowestSupportedVersion())
            .append(",\"highest\":").append(msg.highestSupportedVersion())
            .append(",\"schemas\":[");
        for (int v = 0; v < schemas.length; v++) {
            if (v > 0) b.append(',');
            b.append(schemas[v] == null ? "null" : type(schemas[v]));
        }
        StringBuilder d = new StringBuilder("{");
        defaults(msg.getClass(), d);
        return b.append("],\"defaults\":").append(d).append("}}").toString();
    }

    /** Every MetadataRecordType, then each argument: a generated message class, or serde:CLASS. */
    public static void main(String[] args) throws Exception {
        {
            for (MetadataRecordType t : MetadataRecordType.values()) {
                ApiMessage msg = t.newMetadataRecord();
                if (msg.lowestSupportedVersion() != t.lowestSupportedVersion()
                    || msg.highestSupportedVersion() != t.highestSupportedVersion()) {
                    throw new IllegalStateException(t + ": enum and class disagree on versions");
                }
                System.out.println(describe(msg, "\"id\":" + t.id() + ",\"name\":" + q(t.name()) + ","));
            }
        }
        for (String name : args) {
            if (name.startsWith("serde:")) {
                // a CoordinatorRecordSerde: which key/value classes each record type (0..255) maps to
                Object serde = Class.forName(name.substring(6)).getConstructor().newInstance();
                Method keyFor = null, valueFor = null;
                for (Class<?> c = serde.getClass(); c != null; c = c.getSuperclass()) {
                    for (Method m : c.getDeclaredMethods()) {
                        if (m.getName().equals("apiMessageKeyFor") && keyFor == null) keyFor = m;
                        if (m.getName().equals("apiMessageValueFor") && valueFor == null) valueFor = m;
                    }
                }
                keyFor.setAccessible(true);
                valueFor.setAccessible(true);
                StringBuilder b = new StringBuilder("{\"serde\":").append(q(name.substring(6))).append(",\"types\":{");
                boolean first = true;
                for (short t = 0; t < 256; t++) {
                    String k, v;
                    try {
                        k = keyFor.invoke(serde, t).getClass().getName();
                        v = valueFor.invoke(serde, t).getClass().getName();
                    } catch (java.lang.reflect.InvocationTargetException e) {
                        continue;  // unknown record type
                    }
                    if (!first) b.append(',');
                    first = false;
                    b.append(q(Short.toString(t))).append(":[").append(q(k)).append(',').append(q(v)).append(']');
                }
                System.out.println(b.append("}}"));
                continue;
            }
            Message msg = (Message) Class.forName(name).getConstructor().newInstance();
            System.out.println(describe(msg, "\"name\":" + q(name) + ","));
        }
    }
}
