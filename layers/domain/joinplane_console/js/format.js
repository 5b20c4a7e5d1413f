import { h } from "./dom.js";

const relative = new Intl.RelativeTimeFormat("en", { numeric: "auto", style: "short" });
const absolute = new Intl.DateTimeFormat("en", { dateStyle: "medium", timeStyle: "medium", timeZone: "UTC" });
const UNITS = [
  ["day", 86400],
  ["hour", 3600],
  ["minute", 60],
  ["second", 1],
];

export function ago(iso) {
  const seconds = Math.round((Date.parse(iso) - Date.now()) / 1000);
  for (const [unit, size] of UNITS) {
    if (Math.abs(seconds) >= size || unit === "second") return relative.format(Math.trunc(seconds / size), unit);
  }
  return "";
}

export function when(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso, title: `${absolute.format(new Date(iso))} UTC`, text: ago(iso) });
}

export function stamp(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso, text: `${absolute.format(new Date(iso))} UTC` });
}

export function memory(mb) {
  if (!mb) return null;
  return mb >= 1024 ? `${(mb / 1024).toFixed(mb % 1024 ? 1 : 0)} GiB` : `${mb} MiB`;
}

export function resources(machine) {
  if (!machine) return "—";
  const parts = [
    machine.cpuCount ? `${machine.cpuCount} CPU` : null,
    memory(machine.memoryMb),
    machine.gpuCount ? `${machine.gpuCount} GPU` : null,
    [machine.os, machine.arch].filter(Boolean).join("/") || null,
  ].filter(Boolean);
  return parts.join(" · ") || "—";
}

export function badge(state) {
  return h("span", { class: `badge ${state}`, text: state });
}

// What the join proved of a machine's TPM (docs/tpm.md), in one line an operator can act on.
export function tpmSummary(tpm) {
  if (!tpm || !tpm.ekPublicKeySha256) return "—";
  const ek = `EK ${tpm.ekPublicKeySha256.slice(0, 12)}…`;
  if (!tpm.activated) return `${ek}: not activated (counts as no TPM)`;
  const how = tpm.verifiedBy === "manufacturer" ? `manufacturer ${tpm.manufacturer || ""}`.trim() : tpm.verifiedBy;
  const trusted = how ? `verified by ${how}` : `not trusted${tpm.ekCertificateProblem ? `: ${tpm.ekCertificateProblem}` : ""}`;
  // A real EK certificate's serial is often 20 bytes of hex: shown whole on the request's page.
  const serial = String(tpm.ekCertificateSerial || "");
  const short = serial.length > 16 ? `${serial.slice(0, 12)}…` : serial;
  const certificate = tpm.ekCertificateIssuer ? `; EK certificate of ${tpm.ekCertificateIssuer}, serial ${short}` : "";
  return `${ek}: activated, ${trusted}${certificate}`;
}
