import "./styles.css";

import { mountApp } from "./app";

const root = document.getElementById("app");
if (root) void mountApp(root);
