import "../styles.css";
import "./quick.css";

import { mountQuickAsk } from "./quick";

const root = document.getElementById("quick");
if (root) void mountQuickAsk(root);
