// A JSON-lines reader for the dev Hive pair, under the name of hive-hcatalog-core's SerDe.
//
// The pair runs from the pyspark wheel's jars, which hold Hive 2.3 without hive-hcatalog-core, so the
// DDL trib writes for a jsonl table (ROW FORMAT SERDE 'org.apache.hive.hcatalog.data.JsonSerDe', the
// SerDe a real Hive has) named a class the pair did not have. This class takes that name on the pair's
// classpath only (tributary_read/services/hive.py): the table made locally is the one a real Hive
// takes, and its rows read back. It is never in the UDF jar users ship.
//
// One JSON object per line; fields matched by name, case-insensitively (Hive's columns are lower
// case); a missing field or a JSON null is NULL. A line that is not a JSON object, or a value that
// is not of its column's type, fails the query (SerDeException) as hcatalog's does: never a
// silently NULL column. Timestamps go through Hive's own TimestampParser, as hcatalog's do:
// "yyyy-MM-dd HH:mm:ss[.f]", or the table's 'timestamp.formats' (e.g. millis). Reading only.
package org.apache.hive.hcatalog.data;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.sql.Date;
import java.sql.Timestamp;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hive.common.type.HiveChar;
import org.apache.hadoop.hive.common.type.HiveDecimal;
import org.apache.hadoop.hive.common.type.HiveVarchar;
import org.apache.hadoop.hive.serde.serdeConstants;
import org.apache.hadoop.hive.serde2.AbstractSerDe;
import org.apache.hadoop.hive.serde2.SerDeException;
import org.apache.hadoop.hive.serde2.SerDeStats;
import org.apache.hadoop.hive.serde2.objectinspector.ObjectInspector;
import org.apache.hadoop.hive.serde2.typeinfo.CharTypeInfo;
import org.apache.hadoop.hive.serde2.typeinfo.ListTypeInfo;
import org.apache.hadoop.hive.serde2.typeinfo.MapTypeInfo;
import org.apache.hadoop.hive.serde2.typeinfo.PrimitiveTypeInfo;
import org.apache.hadoop.hive.serde2.typeinfo.StructTypeInfo;
import org.apache.hadoop.hive.serde2.typeinfo.TypeInfo;
import org.apache.hadoop.hive.serde2.typeinfo.TypeInfoFactory;
import org.apache.hadoop.hive.serde2.typeinfo.TypeInfoUtils;
import org.apache.hadoop.hive.serde2.typeinfo.VarcharTypeInfo;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.io.Writable;
import org.apache.hive.common.util.HiveStringUtils;
import org.apache.hive.common.util.TimestampParser;

public class JsonSerDe extends AbstractSerDe {
  private static final ObjectMapper JSON = new ObjectMapper();
  private StructTypeInfo rowType;
  private TimestampParser timestamps;
  private ObjectInspector inspector;

  @Override
  public void initialize(Configuration conf, Properties table) throws SerDeException {
    String names = table.getProperty(serdeConstants.LIST_COLUMNS, "");
    String types = table.getProperty(serdeConstants.LIST_COLUMN_TYPES, "");
    String delim = table.getProperty(serdeConstants.COLUMN_NAME_DELIMITER, ",");
    List<String> columns = new ArrayList<>();
    if (!names.isEmpty()) {
      for (String c : names.split(java.util.regex.Pattern.quote(delim))) {
        columns.add(c.toLowerCase(Locale.ROOT));
      }
    }
    List<TypeInfo> typeInfos =
        types.isEmpty() ? new ArrayList<>() : TypeInfoUtils.getTypeInfosFromTypeString(types);
    if (columns.size() != typeInfos.size()) {
      throw new SerDeException("JsonSerDe: " + columns.size() + " column names but " + typeInfos.size()
          + " types");
    }
    rowType = (StructTypeInfo) TypeInfoFactory.getStructTypeInfo(columns, typeInfos);
    String formats = table.getProperty(serdeConstants.TIMESTAMP_FORMATS);
    timestamps = formats == null ? new TimestampParser()
        : new TimestampParser(HiveStringUtils.splitAndUnEscape(formats));
    inspector = TypeInfoUtils.getStandardJavaObjectInspectorFromTypeInfo(rowType);
  }

  @Override
  public Object deserialize(Writable blob) throws SerDeException {
    String line;
    if (blob instanceof Text) {
      line = blob.toString();
    } else if (blob instanceof BytesWritable) {
      BytesWritable b = (BytesWritable) blob;
      line = new String(b.getBytes(), 0, b.getLength(), StandardCharsets.UTF_8);
    } else {
      throw new SerDeException("JsonSerDe reads Text, not " + blob.getClass().getName());
    }
    JsonNode node;
    try {
      node = JSON.readTree(line);
    } catch (IOException e) {
      throw new SerDeException("not a JSON line: " + abbreviate(line), e);
    }
    if (node == null || !node.isObject()) {
      throw new SerDeException("not a JSON object: " + abbreviate(line));
    }
    return struct(node, rowType, "");
  }

  private static String abbreviate(String s) {
    return s.length() > 200 ? s.substring(0, 200) + "..." : s;
  }

  private List<Object> struct(JsonNode node, StructTypeInfo type, String path) throws SerDeException {
    Map<String, JsonNode> byName = new HashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = node.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      byName.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
    }
    List<String> names = type.getAllStructFieldNames();
    List<TypeInfo> types = type.getAllStructFieldTypeInfos();
    List<Object> row = new ArrayList<>(Arrays.asList(new Object[names.size()]));
    for (int i = 0; i < names.size(); i++) {
      String name = names.get(i);
      row.set(i, value(byName.get(name.toLowerCase(Locale.ROOT)), types.get(i), path + name));
    }
    return row;
  }

  private Object value(JsonNode v, TypeInfo type, String path) throws SerDeException {
    if (v == null || v.isNull()) {
      return null;
    }
    switch (type.getCategory()) {
      case STRUCT:
        if (!v.isObject()) {
          throw mismatch(path, type, v);
        }
        return struct(v, (StructTypeInfo) type, path + ".");
      case LIST: {
        if (!v.isArray()) {
          throw mismatch(path, type, v);
        }
        TypeInfo element = ((ListTypeInfo) type).getListElementTypeInfo();
        List<Object> out = new ArrayList<>(v.size());
        for (int i = 0; i < v.size(); i++) {
          out.add(value(v.get(i), element, path + "[" + i + "]"));
        }
        return out;
      }
      case MAP: {
        if (!v.isObject()) {
          throw mismatch(path, type, v);
        }
        MapTypeInfo m = (MapTypeInfo) type;
        Map<Object, Object> out = new LinkedHashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = v.fields(); it.hasNext(); ) {
          Map.Entry<String, JsonNode> e = it.next();
          out.put(value(JSON.getNodeFactory().textNode(e.getKey()), m.getMapKeyTypeInfo(), path),
              value(e.getValue(), m.getMapValueTypeInfo(), path + "." + e.getKey()));
        }
        return out;
      }
      case PRIMITIVE:
        return primitive(v, (PrimitiveTypeInfo) type, path);
      default:
        throw new SerDeException("JsonSerDe cannot read column type " + type.getTypeName() + " (" + path + ")");
    }
  }

  private Object primitive(JsonNode v, PrimitiveTypeInfo type, String path) throws SerDeException {
    try {
      switch (type.getPrimitiveCategory()) {
        case STRING:
          return v.isValueNode() ? v.asText() : v.toString();
        case CHAR:
          return new HiveChar(v.asText(), ((CharTypeInfo) type).getLength());
        case VARCHAR:
          return new HiveVarchar(v.asText(), ((VarcharTypeInfo) type).getLength());
        case BOOLEAN:
          if (v.isBoolean()) {
            return v.booleanValue();
          }
          if (v.isTextual() && (v.asText().equalsIgnoreCase("true") || v.asText().equalsIgnoreCase("false"))) {
            return Boolean.parseBoolean(v.asText());
          }
          throw mismatch(path, type, v);
        case BYTE:
          return Byte.valueOf(integral(v, path, type).byteValueExact());
        case SHORT:
          return Short.valueOf(integral(v, path, type).shortValueExact());
        case INT:
          return Integer.valueOf(integral(v, path, type).intValueExact());
        case LONG:
          return Long.valueOf(integral(v, path, type).longValueExact());
        case FLOAT:
          return Float.valueOf((float) number(v, path, type));
        case DOUBLE:
          return Double.valueOf(number(v, path, type));
        case DECIMAL:
          return HiveDecimal.create(v.isNumber() ? v.decimalValue() : new java.math.BigDecimal(v.asText()));
        case DATE:
          return Date.valueOf(v.asText());
        case TIMESTAMP:
          return timestamp(v, path, type);
        case BINARY:
          return Base64.getDecoder().decode(v.asText());
        default:
          throw new SerDeException("JsonSerDe cannot read column type " + type.getTypeName() + " (" + path + ")");
      }
    } catch (ArithmeticException | IllegalArgumentException | java.time.DateTimeException e) {
      throw mismatch(path, type, v);
    }
  }

  private static java.math.BigInteger integral(JsonNode v, String path, TypeInfo type) throws SerDeException {
    if (v.isIntegralNumber()) {
      return v.bigIntegerValue();
    }
    if (v.isTextual()) {
      return new java.math.BigInteger(v.asText().trim());
    }
    throw mismatch(path, type, v);
  }

  private static double number(JsonNode v, String path, TypeInfo type) throws SerDeException {
    if (v.isNumber()) {
      return v.doubleValue();
    }
    if (v.isTextual()) {
      return Double.parseDouble(v.asText().trim());
    }
    throw mismatch(path, type, v);
  }

  private Timestamp timestamp(JsonNode v, String path, TypeInfo type) throws SerDeException {
    if (!v.isTextual() && !v.isIntegralNumber()) {
      throw mismatch(path, type, v);
    }
    return timestamps.parseTimestamp(v.asText().trim());  // hcatalog's parser, with its formats
  }

  private static SerDeException mismatch(String path, TypeInfo type, JsonNode v) {
    return new SerDeException("field " + path + " is not a " + type.getTypeName() + ": "
        + abbreviate(v.toString()));
  }

  @Override
  public ObjectInspector getObjectInspector() {
    return inspector;
  }

  @Override
  public Class<? extends Writable> getSerializedClass() {
    return Text.class;
  }

  @Override
  public Writable serialize(Object obj, ObjectInspector oi) throws SerDeException {
    throw new SerDeException("the dev Hive pair's JsonSerDe reads JSON lines only: write them with trib");
  }

  @Override
  public SerDeStats getSerDeStats() {
    return null;
  }
}
